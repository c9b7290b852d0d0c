// The OpenAI request bodies onyx serves, checked field by field: a wrong type, an out-of-range
// value, an unknown field or one onyx does not support is an ApiError naming the field.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "genai/search.h"
#include "onyx/error.h"

namespace onyx::serve {

// An HTTP error with OpenAI's error object: {"error": {message, type, param, code}}.
struct ApiError : Error {
  ApiError(int status, std::string message, std::string param = "", std::string type = "invalid_request_error",
           std::string code = "")
      : Error(std::move(message)), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

struct Parsed {
  std::string model;
  std::string prompt_text;            // to encode (completions: with the tokenizer's special tokens)
  std::vector<int64_t> prompt_ids;    // or the prompt as token ids
  bool add_special_tokens = true;
  genai::SearchOptions search;
  bool max_tokens_given = false;
  std::string max_tokens_field = "max_tokens";
  bool stream = false, include_usage = false;
  bool ignore_eos = false;
  // Chat: the images of the messages' image_url parts (data URLs), decoded from base64, in the
  // order they appear; the template sees each as a part {"type": "image"} where it stood.
  std::vector<std::string> images;
};

// Renders chat messages to a prompt with the folder's chat template (tokenizer_config.json).
class ChatFormatter {
 public:
  explicit ChatFormatter(const std::string& model_dir);
  ~ChatFormatter();
  // The prompt for `messages` (checked: an array of {role, content}), with the generation
  // prompt; `extra` holds template variables such as tools.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& extra) const;
  // Whether the folder has a template (else render() is a 400 that says where it looked).
  bool available() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bodies are read keeping their key order (tool schemas render as the client wrote them).
Parsed parse_completion(const nlohmann::ordered_json& body);
// `images`: whether the model takes image_url parts (a vision-language folder).
Parsed parse_chat(const nlohmann::ordered_json& body, const ChatFormatter& chat, bool images = false);

}  // namespace onyx::serve
