// Chat templates: a model's `chat_template` (Jinja, from tokenizer_config.json or
// chat_template.jinja) turns a conversation into the prompt the model was trained on. onyx
// renders them with its own Jinja interpreter exactly as Hugging Face transformers'
// apply_chat_template does with jinja2: trim_blocks and lstrip_blocks, the loopcontrols
// extension, raise_exception(message), strftime_now(format) and the tojson filter
// (json.dumps with non-ASCII kept), jinja2's Undefined, Python's str() and repr().
//
// Variables are JSON. Use nlohmann::ordered_json to keep the key order of the request (as
// Python dicts do): tojson and `for k, v in d.items()` print keys in that order, so a
// nlohmann::json (whose keys are sorted) renders tool schemas differently from transformers.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

namespace onyx::genai {

namespace jinja {
struct ParsedTemplate;
}

class ChatTemplate {
 public:
  // Parses `source` once; a syntax error is an onyx::Error naming line and column
  // ("parsing the chat template: line 3, column 12: unknown tag 'foo'").
  // `special_tokens` (bos_token, eos_token, ...: see read_special_tokens) become variables of
  // apply_chat_template.
  explicit ChatTemplate(std::string source, nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());
  // The folder's template (find_chat_template) with its special tokens (read_special_tokens).
  static ChatTemplate from_folder(const std::string& model_dir, const std::string& name = "");

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // Renders with `variables` (a JSON object) as the template's variables. Thread-safe.
  // A template error, and raise_exception(message), are onyx::Errors naming the line and
  // column; Error::message() is raise_exception's message as the template wrote it.
  std::string render(const nlohmann::ordered_json& variables) const;

  const std::string& source() const;
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

 private:
  std::shared_ptr<const jinja::ParsedTemplate> parsed_;
  nlohmann::ordered_json special_tokens_;
};

// The variables transformers passes (messages, tools = None, documents = None,
// add_generation_prompt, the special tokens), then `extra` (tools, date_string,
// enable_thinking, ...: any template keyword), and renders them.
std::string apply_chat_template(const ChatTemplate& tmpl, const nlohmann::ordered_json& messages,
                                bool add_generation_prompt,
                                const nlohmann::ordered_json& extra = nlohmann::ordered_json::object());

// The chat template of a model folder, as transformers finds it: chat_template.jinja, else
// tokenizer_config.json's "chat_template" (a string, or a list of {"name", "template"} from
// which `name` is taken, "default" when empty), else chat_template.json. A named template may
// also be additional_chat_templates/<name>.jinja. A folder without one is an error that says
// where it looked.
std::string find_chat_template(const std::string& model_dir, const std::string& name = "");

// The special tokens that templates read, from tokenizer_config.json then
// special_tokens_map.json: bos_token, eos_token, unk_token, pad_token, sep_token, cls_token,
// mask_token (strings; an AddedToken object gives its "content") and
// additional_special_tokens (a list). Absent tokens are left out.
nlohmann::ordered_json read_special_tokens(const std::string& model_dir);

}  // namespace onyx::genai
