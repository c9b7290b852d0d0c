#include "genai/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "genai/added_vocabulary.h"
#include "genai/decoder.h"
#include "genai/json_util.h"
#include "genai/model.h"
#include "genai/normalizer.h"
#include "genai/post_processor.h"
#include "genai/pre_tokenizer.h"
#include "genai/token_stream.h"
#include "genai/unicode.h"

namespace onyx::genai {
namespace fs = std::filesystem;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ONYX_CHECK(in, "cannot open '", path.string(), "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  ONYX_CHECK(!in.bad(), "cannot read '", path.string(), "'");
  return ss.str();
}

Json parse_json(std::string_view text) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    throw Error(cat("not valid JSON: ", e.what()));
  }
}

struct Truncation {
  size_t max_length = 0;
  bool left = false;  // direction Left: keep the end
};

struct Padding {
  std::optional<size_t> fixed;  // strategy Fixed(n); BatchLongest pads a single sequence to itself
  std::optional<size_t> multiple_of;
  bool left = false;
  int32_t pad_id = 0;
};

std::optional<Truncation> parse_truncation(const JsonNode& n) {
  if (n.is_null()) return std::nullopt;
  Truncation t;
  int64_t max = n.at("max_length").as_int();
  if (max < 0) n.at("max_length").fail("must not be negative");
  t.max_length = static_cast<size_t>(max);
  t.left = n.string_or("direction", "Right") == "Left";
  return t;
}

std::optional<Padding> parse_padding(const JsonNode& n) {
  if (n.is_null()) return std::nullopt;
  Padding p;
  JsonNode strategy = n.get("strategy");
  if (strategy.is_object()) {
    int64_t size = strategy.at("Fixed").as_int();
    if (size < 0) strategy.at("Fixed").fail("must not be negative");
    p.fixed = static_cast<size_t>(size);
  } else if (!strategy.is_null() && strategy.as_string() != "BatchLongest") {
    strategy.fail(cat("unknown padding strategy \"", strategy.as_string(), "\""));
  }
  JsonNode multiple = n.get("pad_to_multiple_of");
  if (!multiple.is_null() && multiple.as_int() > 0) p.multiple_of = static_cast<size_t>(multiple.as_int());
  p.left = n.string_or("direction", "Right") == "Left";
  p.pad_id = static_cast<int32_t>(n.int_or("pad_id", 0));
  return p;
}

// tokenizer_config.json spells a token as "text", {"content": "text", ...} or null.
std::optional<std::string> config_token(const Json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::optional<Truncation> truncation;
  std::optional<Padding> padding;
  std::optional<int32_t> bos, eos, pad;

  void load(const Json& root) {
    JsonNode doc(root, "");
    doc.expect_object();
    // Added tokens come last: they take their ids from the model's vocabulary, and normalized
    // ones are matched in their normalized spelling.
    normalizer = make_normalizer(doc.get("normalizer"));
    pre_tokenizer = make_pre_tokenizer(doc.get("pre_tokenizer"));
    model = make_model(doc.at("model"));
    post_processor = make_post_processor(doc.get("post_processor"));
    decoder = make_decoder(doc.get("decoder"));
    added.load(doc.get("added_tokens"), model->vocab(), normalizer.get());
    truncation = parse_truncation(doc.get("truncation"));
    padding = parse_padding(doc.get("padding"));
  }

  void load_config(const Json& config) {
    auto lookup = [&](const char* key) -> std::optional<int32_t> {
      auto token = config_token(config, key);
      if (!token) return std::nullopt;
      if (auto id = added.find(*token)) return id;
      return model->vocab().find(*token);
    };
    if (!bos) bos = lookup("bos_token");
    if (!eos) eos = lookup("eos_token");
    if (!pad) pad = lookup("pad_token");
  }

  void encode_text(std::string_view text, std::vector<int32_t>& ids) const {
    std::vector<TextSplit> raw, normalized;
    std::vector<Piece> pieces;
    added.split(text, false, raw);
    for (const TextSplit& r : raw) {
      if (r.id >= 0) {
        ids.push_back(r.id);
        continue;
      }
      if (r.end == r.begin) continue;
      std::string segment(text.substr(r.begin, r.end - r.begin));
      bool at_origin = r.begin == 0;
      if (normalizer) normalizer->normalize(segment, at_origin);
      added.split(segment, true, normalized);
      for (const TextSplit& s : normalized) {
        if (s.id >= 0) {
          ids.push_back(s.id);
          continue;
        }
        if (s.end == s.begin) continue;
        pieces.clear();
        pieces.push_back({segment.substr(s.begin, s.end - s.begin), at_origin && s.begin == 0});
        if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
        for (const Piece& p : pieces) model->tokenize(p.text, ids);
      }
    }
  }

  const std::string* token_of(int32_t id) const {
    if (const AddedToken* t = added.by_id(id)) return &t->decoded;
    return model->vocab().token(id);
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_json(std::string_view json_text, const std::string& name) {
  return with_context(cat("loading tokenizer '", name, "'"), [&] {
    auto impl = std::make_unique<Impl>();
    impl->load(parse_json(json_text));
    return Tokenizer(std::move(impl));
  });
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  fs::path p(path);
  bool folder = fs::is_directory(p);
  fs::path file = folder ? p / "tokenizer.json" : p;
  Tokenizer tok = with_context(cat("loading tokenizer '", file.string(), "'"), [&] {
    auto impl = std::make_unique<Impl>();
    impl->load(parse_json(read_file(file)));
    return Tokenizer(std::move(impl));
  });
  // Look beside the file too: a tokenizer.json given by path still has its folder's config.
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    fs::path config = file.parent_path() / name;
    if (!fs::is_regular_file(config)) continue;
    with_context(cat("loading '", config.string(), "'"), [&] { tok.impl_->load_config(parse_json(read_file(config))); });
  }
  return tok;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  size_t bad = utf8_invalid_at(text);
  ONYX_CHECK(bad == std::string_view::npos, "encode: the text is not valid UTF-8 (byte ", bad, ")");
  const Impl& m = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  m.encode_text(text, ids);
  bool specials = add_special_tokens && m.post_processor;
  if (m.truncation) {
    size_t room = m.truncation->max_length;
    if (specials) {
      size_t added = m.post_processor->added_tokens();
      ONYX_CHECK(room >= added, "truncation max_length ", room, " leaves no room for the ", added, " special tokens");
      room -= added;
    }
    if (ids.size() > room) {
      if (m.truncation->left) ids.erase(ids.begin(), ids.end() - static_cast<ptrdiff_t>(room));
      else ids.resize(room);
    }
  }
  if (specials) m.post_processor->process(ids);
  if (m.padding) {
    size_t target = m.padding->fixed.value_or(ids.size());
    if (m.padding->multiple_of && target % *m.padding->multiple_of)
      target += *m.padding->multiple_of - target % *m.padding->multiple_of;
    if (ids.size() < target) {
      size_t n = target - ids.size();
      ids.insert(m.padding->left ? ids.begin() : ids.end(), n, m.padding->pad_id);
    }
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& m = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* t = m.token_of(id);
    if (!t) continue;
    if (skip_special_tokens && m.added.is_special(*t)) continue;
    tokens.push_back(*t);
  }
  if (!m.decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  m.decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

TokenStream Tokenizer::stream(bool skip_special_tokens) const { return TokenStream(*this, skip_special_tokens); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.find(token)) return id;
  return impl_->model->vocab().find(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const std::string* t = impl_->token_of(id)) return *t;
  return std::nullopt;
}

size_t Tokenizer::vocab_size() const {
  size_t n = impl_->model->vocab().size();
  for (const AddedToken& t : impl_->added.tokens())
    if (!impl_->model->vocab().find(t.content)) ++n;
  return n;
}

bool Tokenizer::is_joined_byte(int32_t id) const {
  if (!impl_->decoder || !impl_->decoder->joins_byte_tokens()) return false;
  const std::string* t = impl_->token_of(id);
  return t && parse_byte_token(*t) >= 0;
}

bool Tokenizer::is_special(int32_t id) const {
  const std::string* t = impl_->token_of(id);
  return t && impl_->added.is_special(*t);
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::pad_id() const { return impl_->pad; }

}  // namespace onyx::genai
