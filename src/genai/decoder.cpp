#include "genai/decoder.h"

#include "genai/byte_level.h"
#include "genai/normalizer.h"
#include "genai/regex.h"
#include "genai/unicode.h"

namespace onyx::genai {
namespace {

// Bytes as text, each invalid sequence shown as one U+FFFD (String::from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t bad = utf8_invalid_at(bytes.substr(i));
    if (bad == std::string_view::npos) {
      out.append(bytes.substr(i));
      break;
    }
    out.append(bytes.substr(i, bad));
    i += bad;
    // Skip the maximal prefix of a valid sequence (at least one byte), as from_utf8_lossy does.
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 1;
    size_t k = 1;
    for (; k < want && i + k < bytes.size(); ++k) {
      unsigned char d = static_cast<unsigned char>(bytes[i + k]);
      unsigned char lo = 0x80, hi = 0xBF;
      if (k == 1) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
      }
      if (d < lo || d > hi) break;
    }
    out += "\xEF\xBF\xBD";
    i += k;
  }
  return out;
}

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens)
      if (!append_chars_as_bytes(t, bytes)) bytes += t;
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepends) : replacement_(std::move(replacement)), prepends_(prepends) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepends_)) out.push_back(' ');
          k += replacement_.size();
        } else {
          out.push_back(t[k++]);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool prepends_;
};

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  size_t p = s.find(from);
  if (from.empty() || p == std::string::npos) return;
  std::string out;
  size_t last = 0;
  for (; p != std::string::npos; p = s.find(from, last)) {
    out.append(s, last, p - last);
    out.append(to);
    last = p + from.size();
  }
  out.append(s, last, std::string::npos);
  s.swap(out);
}

void wordpiece_cleanup(std::string& t) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [from, to] : kRules) replace_all(t, from, to);
}

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t = " " + t;
      }
      if (cleanup_) wordpiece_cleanup(t);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (!suffix_.empty()) replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const std::string& pattern, std::string content) : regex_(pattern), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<Span> m;
    for (std::string& t : tokens) {
      regex_.find_all(t, m);
      if (m.empty()) continue;
      std::string out;
      size_t last = 0;
      for (auto [b, e] : m) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      }
      out.append(t, last, std::string::npos);
      t.swap(out);
    }
  }

 private:
  Regex regex_;
  std::string content_;
};

// Runs of <0xNN> tokens become the text of their bytes, or one U+FFFD per byte when the
// run is not valid UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (utf8_invalid_at(bytes) == std::string_view::npos) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < count; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (std::string& t : tokens) {
      int byte = parse_byte_token(t);
      if (byte >= 0) {
        bytes.push_back(static_cast<char>(byte));
        ++count;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }

  bool joins_byte_tokens() const override { return true; }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // byte offset, code point
      for (size_t i = 0; i < t.size();) {
        char32_t cp;
        size_t n = utf8_next(t, i, cp);
        chars.emplace_back(i, cp);
        i += n;
      }
      size_t cut_start = 0;
      for (size_t i = 0; i < start_ && i < chars.size() && chars[i].second == content_; ++i) cut_start = i + 1;
      size_t cut_stop = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        size_t index = chars.size() - i - 1;
        if (chars[index].second != content_) break;
        cut_stop = index;
      }
      if (cut_stop <= cut_start) { t.clear(); continue; }
      size_t b = cut_start < chars.size() ? chars[cut_start].first : t.size();
      size_t e = cut_stop < chars.size() ? chars[cut_stop].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class CtcDecoder : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delimiter, bool cleanup)
      : pad_(std::move(pad)), delimiter_(std::move(delimiter)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;  // consecutive duplicates collapse
      std::string t = tokens[i];
      replace_all(t, pad_, "");
      if (cleanup_) {
        wordpiece_cleanup(t);
        replace_all(t, delimiter_, " ");
      }
      if (!t.empty()) out.push_back(std::move(t));
    }
    tokens.swap(out);
  }

 private:
  std::string pad_, delimiter_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : parts_) d->decode_chain(tokens);
  }
  bool joins_byte_tokens() const override {
    for (const auto& d : parts_)
      if (d->joins_byte_tokens()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::unique_ptr<Decoder> make_decoder(const JsonNode& node) {
  if (node.is_null()) return nullptr;
  std::string type = node.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    std::string scheme = node.string_or("prepend_scheme", node.bool_or("add_prefix_space", true) ? "always" : "never");
    return std::make_unique<MetaspaceDecoder>(node.at("replacement").as_string(), scheme != "never");
  }
  if (type == "WordPiece") return std::make_unique<WordPieceDecoder>(node.string_or("prefix", "##"), node.bool_or("cleanup", true));
  if (type == "BPEDecoder") return std::make_unique<BpeDecoder>(node.string_or("suffix", "</w>"));
  if (type == "Replace")
    return with_context(cat(node.path(), "/pattern"), [&] {
      return std::make_unique<ReplaceDecoder>(pattern_source(node.at("pattern")), node.at("content").as_string());
    });
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    std::string c = node.at("content").as_string();
    char32_t cp = 0;
    if (c.empty() || utf8_next(c, 0, cp) != c.size()) node.at("content").fail("expected one character");
    int64_t start = node.int_or("start", 0), stop = node.int_or("stop", 0);
    if (start < 0 || stop < 0) node.fail("start and stop must not be negative");
    return std::make_unique<StripDecoder>(cp, size_t(start), size_t(stop));
  }
  if (type == "CTC")
    return std::make_unique<CtcDecoder>(node.string_or("pad_token", "<pad>"), node.string_or("word_delimiter_token", "|"),
                                        node.bool_or("cleanup", true));
  if (type == "Sequence") {
    JsonNode list = node.at("decoders");
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto d = make_decoder(list.at(i))) parts.push_back(std::move(d));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  node.fail(cat("decoder type \"", type, "\" is not supported by onyx"));
}

}  // namespace onyx::genai
