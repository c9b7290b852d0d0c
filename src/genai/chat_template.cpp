#include "genai/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "genai/jinja_ast.h"
#include "genai/jinja_lexer.h"
#include "genai/jinja_render.h"
#include "genai/unicode.h"
#include "onyx/error.h"

namespace fs = std::filesystem;

namespace onyx::genai {

namespace jinja {
struct ParsedTemplate {
  std::string source;
  Body body;
};
}  // namespace jinja

using OrderedJson = nlohmann::ordered_json;

ChatTemplate::ChatTemplate(std::string source, OrderedJson special_tokens)
    : special_tokens_(std::move(special_tokens)) {
  auto parsed = std::make_shared<jinja::ParsedTemplate>();
  with_context("parsing the chat template", [&] {
    size_t bad = utf8_invalid_at(source);
    ONYX_CHECK(bad == std::string::npos, "the template is not valid UTF-8 (byte ", bad, ")");
    parsed->body = jinja::parse_template(source);
  });
  ONYX_CHECK(special_tokens_.is_object(), "chat template: the special tokens must be a JSON object, got ",
             special_tokens_.type_name());
  parsed->source = std::move(source);
  parsed_ = std::move(parsed);
}

ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

const std::string& ChatTemplate::source() const { return parsed_->source; }

std::string ChatTemplate::render(const OrderedJson& variables) const {
  ONYX_CHECK(variables.is_object(), "rendering the chat template: the variables must be a JSON object, got ",
             variables.type_name());
  jinja::Value vars = with_context("rendering the chat template", [&] { return jinja::from_json(variables); });
  jinja::Renderer r(vars.dict());
  std::string out;
  try {
    jinja::render_body(parsed_->body, r, out);
  } catch (Error& e) {
    e.add_context(cat("rendering the chat template: ", jinja::where(r.at.line, r.at.column)));
    throw;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(e.what()).add_context(cat("rendering the chat template: ", jinja::where(r.at.line, r.at.column)));
  }
  return out;
}

std::string apply_chat_template(const ChatTemplate& tmpl, const OrderedJson& messages, bool add_generation_prompt,
                                const OrderedJson& extra) {
  ONYX_CHECK(messages.is_array(), "apply_chat_template: messages must be a JSON array, got ", messages.type_name());
  ONYX_CHECK(extra.is_object() || extra.is_null(), "apply_chat_template: the extra variables must be a JSON object, got ",
             extra.type_name());
  OrderedJson vars = OrderedJson::object();
  vars["messages"] = messages;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  vars["add_generation_prompt"] = add_generation_prompt;
  for (auto it = tmpl.special_tokens().begin(); it != tmpl.special_tokens().end(); ++it) vars[it.key()] = it.value();
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  return tmpl.render(vars);
}

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  ONYX_CHECK(in, "cannot read '", p.string(), "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

OrderedJson read_json(const fs::path& p) {
  return with_context(cat("reading '", p.string(), "'"), [&] {
    try {
      return OrderedJson::parse(read_text(p));
    } catch (const nlohmann::json::exception& e) {
      throw Error(cat("not valid JSON: ", e.what()));
    }
  });
}

}  // namespace

std::string find_chat_template(const std::string& model_dir, const std::string& name) {
  fs::path dir(model_dir);
  ONYX_CHECK(fs::is_directory(dir), "finding the chat template: '", model_dir, "' is not a folder");
  const std::string wanted = name.empty() ? "default" : name;
  if (!name.empty() && name != "default") {
    fs::path named = dir / "additional_chat_templates" / (name + ".jinja");
    if (fs::is_regular_file(named)) return read_text(named);
  }
  if (fs::is_regular_file(dir / "chat_template.jinja") && wanted == "default") return read_text(dir / "chat_template.jinja");
  fs::path config = dir / "tokenizer_config.json";
  std::vector<std::string> names;
  if (fs::is_regular_file(config)) {
    OrderedJson cfg = read_json(config);
    if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
      const OrderedJson& t = cfg["chat_template"];
      if (t.is_string()) {
        ONYX_CHECK(wanted == "default", "'", config.string(), "' has one chat template, not one named '", name, "'");
        return t.get<std::string>();
      }
      ONYX_CHECK(t.is_array(), "'", config.string(), "': chat_template must be a string or a list of {name, template}, got ",
                 t.type_name());
      for (size_t i = 0; i < t.size(); ++i) {
        const OrderedJson& e = t[i];
        ONYX_CHECK(e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("template") &&
                       e["template"].is_string(),
                   "'", config.string(), "': chat_template/", i, " must be an object with string 'name' and 'template'");
        names.push_back(e["name"].get<std::string>());
        if (names.back() == wanted) return e["template"].get<std::string>();
      }
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw Error(cat("'", config.string(), "' has no chat template named '", wanted, "' (it has: ", list, ")"));
    }
  }
  fs::path processor = dir / "chat_template.json";
  if (wanted == "default" && fs::is_regular_file(processor)) {
    OrderedJson j = read_json(processor);
    ONYX_CHECK(j.is_object() && j.contains("chat_template") && j["chat_template"].is_string(), "'", processor.string(),
               "' has no string \"chat_template\"");
    return j["chat_template"].get<std::string>();
  }
  throw Error(cat("'", model_dir, "' has no chat template",
                  name.empty() ? "" : cat(" named '", name, "'"),
                  " (looked for chat_template.jinja, \"chat_template\" in tokenizer_config.json, chat_template.json)"));
}

OrderedJson read_special_tokens(const std::string& model_dir) {
  OrderedJson out = OrderedJson::object();
  static const char* kNames[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};
  auto token_text = [](const OrderedJson& v) -> std::optional<std::string> {
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    return std::nullopt;
  };
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json"}) {
    fs::path p = fs::path(model_dir) / file;
    if (!fs::is_regular_file(p)) continue;
    OrderedJson j = read_json(p);
    if (!j.is_object()) continue;
    for (const char* n : kNames)
      if (j.contains(n))
        if (auto t = token_text(j[n])) out[n] = *t;
    if (j.contains("additional_special_tokens") && j["additional_special_tokens"].is_array()) {
      OrderedJson list = OrderedJson::array();
      for (const auto& v : j["additional_special_tokens"])
        if (auto t = token_text(v)) list.push_back(*t);
      out["additional_special_tokens"] = list;
    }
  }
  return out;
}

ChatTemplate ChatTemplate::from_folder(const std::string& model_dir, const std::string& name) {
  return ChatTemplate(find_chat_template(model_dir, name), read_special_tokens(model_dir));
}

}  // namespace onyx::genai
