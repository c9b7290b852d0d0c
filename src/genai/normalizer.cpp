#include "genai/normalizer.h"

#include <vector>

#include "genai/byte_level.h"
#include "genai/regex.h"
#include "genai/unicode.h"

namespace onyx::genai {
namespace {

// Rewrites text one code point at a time: fn(cp, out) appends what cp becomes.
template <class Fn>
void map_chars(std::string& text, Fn&& fn) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (size_t i = 0; i < text.size();) {
    char32_t cp;
    i += utf8_next(text, i, cp);
    fn(cp, out);
  }
  text.swap(out);
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text, bool&) const override { text = normalize_unicode(text, form_); }

 private:
  NormalForm form_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& text, bool&) const override { text = to_lower(text); }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text, bool& at_origin) const override {
    size_t b = 0, e = text.size();
    if (left_) {
      while (b < e) {
        char32_t cp;
        size_t n = utf8_next(text, b, cp);
        if (!is_white_space(cp)) break;
        b += n;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        char32_t cp;
        utf8_next(text, s, cp);
        if (!is_white_space(cp)) break;
        e = s;
      }
    }
    if (b > 0) at_origin = false;
    text = text.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

// The reference's is_combining_mark: any mark (Mn, Mc, Me).
class StripAccents : public Normalizer {
 public:
  void normalize(std::string& text, bool& at_origin) const override {
    char32_t first = 0;
    if (!text.empty()) utf8_next(text, 0, first);
    if (!text.empty() && is_combining_mark(first)) at_origin = false;
    map_chars(text, [](char32_t c, std::string& out) {
      if (!is_combining_mark(c)) utf8_append(out, c);
    });
  }
};

class Replace : public Normalizer {
 public:
  Replace(const std::string& pattern, std::string content) : regex_(pattern), content_(std::move(content)) {}
  void normalize(std::string& text, bool& at_origin) const override {
    std::vector<Span> m;
    regex_.find_all(text, m);
    if (m.empty()) return;
    if (m[0].first == 0 && content_.empty()) at_origin = false;  // the start was removed
    std::string out;
    size_t last = 0;
    for (auto [b, e] : m) {
      out.append(text, last, b - last);
      out += content_;
      last = e;
    }
    out.append(text, last, std::string::npos);
    text.swap(out);
  }

 private:
  Regex regex_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text, bool&) const override {
    if (!text.empty()) text = prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& text, bool&) const override { text = bytes_to_chars(text); }
};

// BERT's cleanup: drop NUL, U+FFFD and control characters, make whitespace a space, pad CJK
// ideographs with spaces, strip accents (NFD, then drop non-spacing marks), lowercase.
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool strip_accents, bool lowercase)
      : clean_text_(clean_text), chinese_(chinese), strip_accents_(strip_accents), lowercase_(lowercase) {}

  void normalize(std::string& text, bool& at_origin) const override {
    if (clean_text_ || chinese_) {
      map_chars(text, [this, &out_first = at_origin](char32_t c, std::string& out) {
        if (clean_text_) {
          bool tab_or_newline = c == '\t' || c == '\n' || c == '\r';
          if (is_bert_removed(c)) {  // NUL, U+FFFD and controls (not \t \n \r)
            if (out.empty()) out_first = false;
            return;
          }
          if (tab_or_newline || is_white_space(c)) c = ' ';
        }
        if (chinese_ && is_chinese_char(c)) {
          out.push_back(' ');
          utf8_append(out, c);
          out.push_back(' ');
          return;
        }
        utf8_append(out, c);
      });
    }
    if (strip_accents_) {
      text = normalize_unicode(text, NormalForm::kNFD);
      map_chars(text, [&at_origin](char32_t c, std::string& out) {
        if (!is_bert_nonspacing_mark(c)) utf8_append(out, c);
        else if (out.empty()) at_origin = false;
      });
    }
    if (lowercase_) text = to_lower(text);
  }

 private:
  bool clean_text_, chinese_, strip_accents_, lowercase_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(std::string& text, bool& at_origin) const override {
    for (const auto& p : parts_) p->normalize(text, at_origin);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

// A Replace or Split pattern: {"String": s} or {"Regex": r}, as a regex source.
std::string pattern_source(const JsonNode& pattern) {
  pattern.expect_object();
  if (pattern.has("String")) return Regex::escape(pattern.at("String").as_string());
  if (pattern.has("Regex")) return pattern.at("Regex").as_string();
  pattern.fail("expected {\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> make_normalizer(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  std::string type = node.type();
  auto build = [&]() -> std::unique_ptr<Normalizer> {
    if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFC);
    if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFD);
    if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKC);
    if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNFKD);
    if (type == "Lowercase") return std::make_unique<Lowercase>();
    if (type == "Strip") return std::make_unique<Strip>(node.bool_or("strip_left", true), node.bool_or("strip_right", true));
    if (type == "StripAccents") return std::make_unique<StripAccents>();
    if (type == "Prepend") return std::make_unique<Prepend>(node.at("prepend").as_string());
    if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
    if (type == "Replace")
      return with_context(cat(node.path(), "/pattern"), [&] {
        return std::make_unique<Replace>(pattern_source(node.at("pattern")), node.at("content").as_string());
      });
    if (type == "BertNormalizer") {
      bool lowercase = node.bool_or("lowercase", true);
      JsonNode strip = node.get("strip_accents");
      return std::make_unique<BertNormalizer>(node.bool_or("clean_text", true), node.bool_or("handle_chinese_chars", true),
                                              strip.is_null() ? lowercase : strip.as_bool(), lowercase);
    }
    if (type == "Sequence") {
      JsonNode list = node.at("normalizers");
      std::vector<std::unique_ptr<Normalizer>> parts;
      for (size_t i = 0; i < list.size(); ++i)
        if (auto n = make_normalizer(list.at(i))) parts.push_back(std::move(n));
      return std::make_unique<SequenceNormalizer>(std::move(parts));
    }
    node.fail(cat("normalizer type \"", type, "\" is not supported by onyx"));
  };
  return build();
}

}  // namespace onyx::genai
