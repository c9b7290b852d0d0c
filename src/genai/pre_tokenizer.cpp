#include "genai/pre_tokenizer.h"

#include <functional>

#include "genai/byte_level.h"
#include "genai/normalizer.h"
#include "genai/regex.h"
#include "genai/unicode.h"

namespace onyx::genai {
namespace {

// The text cut into stretches that each match the delimiter pattern or not, covering it all.
struct Stretch {
  size_t begin, end;
  bool is_match;
};

std::vector<Stretch> cover(size_t length, const std::vector<Span>& matches) {
  std::vector<Stretch> out;
  if (length == 0) return {{0, 0, false}};
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) out.push_back({prev, b, false});
    out.push_back({b, e, true});
    prev = e;
  }
  if (prev != length) out.push_back({prev, length, false});
  return out;
}

// Each character for which pred holds is one match.
std::vector<Span> char_matches(const std::string& text, const std::function<bool(char32_t)>& pred) {
  std::vector<Span> m;
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    size_t n = utf8_next(text, i, cp);
    if (pred(cp)) m.emplace_back(i, i + n);
    i += n;
  }
  return m;
}

// Appends the pieces of `piece` that `behavior` keeps, given its delimiter stretches.
void split_piece(const Piece& piece, std::vector<Stretch> st, SplitBehavior behavior, bool invert,
                 std::vector<Piece>& out) {
  if (invert)
    for (auto& s : st) s.is_match = !s.is_match;
  std::vector<Stretch> keep;  // is_match now means "remove"
  switch (behavior) {
    case SplitBehavior::kRemoved:
      keep = st;
      break;
    case SplitBehavior::kIsolated:
      for (auto s : st) keep.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (auto s : st) {
        if (s.is_match == prev && !keep.empty()) keep.back().end = s.end;
        else keep.push_back({s.begin, s.end, false});
        prev = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (auto s : st) {
        if (s.is_match && !prev && !keep.empty()) keep.back().end = s.end;
        else keep.push_back({s.begin, s.end, false});
        prev = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (auto it = st.rbegin(); it != st.rend(); ++it) {
        if (it->is_match && !prev && !keep.empty()) keep.back().begin = it->begin;
        else keep.push_back({it->begin, it->end, false});
        prev = it->is_match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    }
  }
  for (const auto& s : keep) {
    if (s.is_match || s.end == s.begin) continue;
    out.push_back({piece.text.substr(s.begin, s.end - s.begin), piece.at_origin && s.begin == 0});
  }
}

// Runs fn on every piece, collecting what it appends.
template <class Fn>
void resplit(std::vector<Piece>& pieces, Fn&& fn) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (const Piece& p : pieces) fn(p, out);
  pieces.swap(out);
}

void split_chars(std::vector<Piece>& pieces, const std::function<bool(char32_t)>& pred, SplitBehavior behavior) {
  resplit(pieces, [&](const Piece& p, std::vector<Piece>& out) {
    split_piece(p, cover(p.text.size(), char_matches(p.text, pred)), behavior, false, out);
  });
}

SplitBehavior parse_behavior(const JsonNode& n) {
  std::string b = n.as_string();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  n.fail(cat("unknown split behavior \"", b, "\""));
}

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, bool use_regex) : add_prefix_space_(add_prefix_space) {
    if (use_regex) regex_ = std::make_unique<Regex>(kGpt2Pattern);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Span> m;
    resplit(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      Piece q = p;
      if (add_prefix_space_ && !q.text.empty() && q.text[0] != ' ') q.text = " " + q.text;
      if (!regex_) {
        out.push_back(std::move(q));
        return;
      }
      regex_->find_all(q.text, m);
      split_piece(q, cover(q.text.size(), m), SplitBehavior::kIsolated, false, out);
    });
    for (Piece& p : pieces) p.text = bytes_to_chars(p.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(const std::string& pattern, SplitBehavior behavior, bool invert)
      : regex_(pattern), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Span> m;
    resplit(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      regex_.find_all(p.text, m);
      split_piece(p, cover(p.text.size(), m), behavior_, invert_, out);
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {
    utf8_next(replacement_, 0, replacement_cp_);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    resplit(pieces, [&](const Piece& p, std::vector<Piece>& out) {
      Piece q{std::string(), p.at_origin};
      q.text.reserve(p.text.size() + 8);
      for (char c : p.text) {
        if (c == ' ') q.text += replacement_;
        else q.text.push_back(c);
      }
      bool starts = q.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && !q.text.empty() &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && q.at_origin)))
        q.text = replacement_ + q.text;
      if (!split_) {
        out.push_back(std::move(q));
        return;
      }
      char32_t r = replacement_cp_;
      split_piece(q, cover(q.text.size(), char_matches(q.text, [r](char32_t c) { return c == r; })),
                  SplitBehavior::kMergedWithNext, false, out);
    });
  }

 private:
  std::string replacement_;
  char32_t replacement_cp_ = 0;
  PrependScheme scheme_;
  bool split_;
};

class BertPre : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_chars(pieces, is_white_space, SplitBehavior::kRemoved);
    split_chars(pieces, is_bert_punctuation, SplitBehavior::kIsolated);
  }
};

// \w+|[^\w\s]+ kept, whitespace dropped.
class WhitespacePre : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    resplit(pieces, [](const Piece& p, std::vector<Piece>& out) {
      size_t i = 0, n = p.text.size();
      while (i < n) {
        char32_t cp;
        size_t len = utf8_next(p.text, i, cp);
        if (is_white_space(cp)) { i += len; continue; }
        bool word = is_word_char(cp);
        size_t b = i;
        i += len;
        while (i < n) {
          len = utf8_next(p.text, i, cp);
          if (is_white_space(cp) || is_word_char(cp) != word) break;
          i += len;
        }
        out.push_back({p.text.substr(b, i - b), p.at_origin && b == 0});
      }
    });
  }
};

class CharSplitPre : public PreTokenizer {
 public:
  CharSplitPre(std::function<bool(char32_t)> pred, SplitBehavior behavior) : pred_(std::move(pred)), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override { split_chars(pieces, pred_, behavior_); }

 private:
  std::function<bool(char32_t)> pred_;
  SplitBehavior behavior_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

PrependScheme parse_prepend_scheme(const JsonNode& node) {
  // Older files say add_prefix_space instead of prepend_scheme.
  JsonNode add = node.get("add_prefix_space");
  JsonNode scheme = node.get("prepend_scheme");
  if (scheme.is_null()) return add.is_null() || add.as_bool() ? PrependScheme::kAlways : PrependScheme::kNever;
  std::string s = scheme.as_string();
  if (!add.is_null() && !add.as_bool() && s != "never") node.fail("add_prefix_space does not match prepend_scheme");
  if (s == "always") return PrependScheme::kAlways;
  if (s == "first") return PrependScheme::kFirst;
  if (s == "never") return PrependScheme::kNever;
  scheme.fail(cat("unknown prepend_scheme \"", s, "\""));
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelPre>(node.bool_or("add_prefix_space", true), node.bool_or("use_regex", true));
  if (type == "Split") {
    JsonNode pattern = node.at("pattern");
    return with_context(pattern.path(), [&] {
      return std::make_unique<SplitPre>(pattern_source(pattern), parse_behavior(node.at("behavior")), node.bool_or("invert", false));
    });
  }
  if (type == "Metaspace") {
    std::string r = node.at("replacement").as_string();
    if (r.empty() || utf8_len(static_cast<unsigned char>(r[0])) != r.size()) node.at("replacement").fail("expected one character");
    return std::make_unique<MetaspacePre>(r, parse_prepend_scheme(node), node.bool_or("split", true));
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPre>();
  if (type == "Whitespace") return std::make_unique<WhitespacePre>();
  if (type == "WhitespaceSplit") return std::make_unique<CharSplitPre>(is_white_space, SplitBehavior::kRemoved);
  if (type == "Punctuation")
    return std::make_unique<CharSplitPre>(is_bert_punctuation, node.has("behavior") ? parse_behavior(node.at("behavior")) : SplitBehavior::kIsolated);
  if (type == "Digits")
    return std::make_unique<CharSplitPre>([](char32_t c) { return c >= '0' && c <= '9'; },
                                          node.bool_or("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  if (type == "CharDelimiterSplit") {
    std::string d = node.at("delimiter").as_string();
    char32_t cp = 0;
    if (d.empty() || utf8_next(d, 0, cp) != d.size()) node.at("delimiter").fail("expected one character");
    return std::make_unique<CharSplitPre>([cp](char32_t c) { return c == cp; }, SplitBehavior::kRemoved);
  }
  if (type == "Sequence") {
    JsonNode list = node.at("pretokenizers");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto p = make_pre_tokenizer(list.at(i))) parts.push_back(std::move(p));
    return std::make_unique<SequencePre>(std::move(parts));
  }
  node.fail(cat("pre-tokenizer type \"", type, "\" is not supported by onyx"));
}

}  // namespace onyx::genai
