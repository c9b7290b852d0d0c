// The tokenizer of a Hugging Face model folder: reads tokenizer.json (and, in a folder,
// tokenizer_config.json for the bos/eos/pad tokens) and encodes and decodes exactly as the
// `tokenizers` package does. Supported: BPE (byte-level and SentencePiece-style with byte
// fallback), WordPiece and WordLevel models, with the normalizers, pre-tokenizers,
// post-processors and decoders that those families use; anything else is an error naming it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace onyx::genai {

class TokenStream;

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a folder holding one. Errors name the file and the
  // JSON path of what is wrong ("loading tokenizer 'x/tokenizer.json': /model/merges/3: ...").
  static Tokenizer from_file(const std::string& path);
  // `name` is how errors refer to the text.
  static Tokenizer from_json(std::string_view json_text, const std::string& name = "tokenizer.json");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // The ids of `text` (valid UTF-8, else an error). add_special_tokens applies the
  // post-processor (e.g. BOS, [CLS] ... [SEP]); truncation and padding from tokenizer.json
  // apply as in the reference.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The text of `ids`; ids that name no token are skipped, as in the reference.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;
  // Decodes one id at a time (see token_stream.h).
  TokenStream stream(bool skip_special_tokens = true) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // Distinct tokens, added tokens included (the reference's get_vocab_size(True)).
  size_t vocab_size() const;
  bool is_special(int32_t id) const;
  // Whether id is a <0xNN> token that the decoder joins with the byte tokens around it
  // (ByteFallback); TokenStream holds such runs until they end.
  bool is_joined_byte(int32_t id) const;

  // From tokenizer_config.json (or special_tokens_map.json) when a folder was loaded.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  std::optional<int32_t> pad_id() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx::genai
