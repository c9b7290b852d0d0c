#include "genai/token_stream.h"

#include "genai/tokenizer.h"

namespace onyx::genai {
namespace {
bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}
}  // namespace

TokenStream::TokenStream(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

void TokenStream::reset() {
  window_.clear();
  context_ = 0;
  context_text_.clear();
  all_.clear();
  emitted_.clear();
}

std::string TokenStream::step(int32_t id) {
  all_.push_back(id);
  // A skipped special token (padding, say) adds nothing, and would only widen the window.
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  window_.push_back(id);
  // A run of byte-fallback tokens reads as text only when whole: one more byte can turn all
  // of it into U+FFFD. It comes out with the token that ends it (or at finish()).
  if (tokenizer_->is_joined_byte(id)) return {};
  // Decoding the context together with the new ids gives each decoder what it needs to
  // know (is this the first token, does a space come before); the new text is what the
  // context did not already say.
  std::string text = tokenizer_->decode(window_, skip_special_);
  if (text.size() <= context_text_.size() || ends_with_replacement(text)) return {};
  std::string out;
  if (text.compare(0, context_text_.size(), context_text_) == 0) {
    out = text.substr(context_text_.size());
  } else {
    std::string full = tokenizer_->decode(all_, skip_special_);
    if (full.size() <= emitted_.size() || full.compare(0, emitted_.size(), emitted_) != 0) return {};
    out = full.substr(emitted_.size());
  }
  emitted_ += out;
  window_.erase(window_.begin(), window_.begin() + static_cast<ptrdiff_t>(context_));
  context_ = window_.size();
  context_text_ = tokenizer_->decode(window_, skip_special_);
  return out;
}

std::string TokenStream::finish() {
  std::string full = tokenizer_->decode(all_, skip_special_);
  std::string out;
  if (full.size() > emitted_.size() && full.compare(0, emitted_.size(), emitted_) == 0) out = full.substr(emitted_.size());
  reset();
  return out;
}

}  // namespace onyx::genai
