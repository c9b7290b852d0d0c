#include "serve/openai.h"

#include <openssl/evp.h>

#include <cmath>
#include <random>
#include <set>

namespace onyx::serve {

namespace {

using json = nlohmann::ordered_json;

ApiError bad(const std::string& field, std::string message) {
  return ApiError(400, std::move(message), field, "invalid_request_error");
}

std::string kind(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// The bytes of a data URL ("data:image/png;base64,...": RFC 2397, base64 by OpenSSL's decoder).
std::string data_url_bytes(const std::string& url, const std::string& at) {
  const size_t comma = url.find(',');
  if (url.rfind("data:", 0) != 0 || comma == std::string::npos)
    throw bad(at, cat(at, ": onyx takes images as data URLs (data:image/png;base64,...); it fetches nothing"));
  const std::string head = url.substr(5, comma - 5);
  if (head.size() < 7 || head.compare(head.size() - 7, 7, ";base64") != 0)
    throw bad(at, cat(at, ": the data URL is not base64 (data:<type>;base64,...)"));
  const std::string b64 = url.substr(comma + 1);
  std::string out(b64.size() / 4 * 3 + 3, '\0');
  EVP_ENCODE_CTX* ctx = EVP_ENCODE_CTX_new();
  if (!ctx) throw Error("out of memory decoding base64");
  EVP_DecodeInit(ctx);
  int n = 0, tail = 0;
  const int ok = EVP_DecodeUpdate(ctx, reinterpret_cast<unsigned char*>(out.data()), &n,
                                  reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
  const int fin = ok >= 0 ? EVP_DecodeFinal(ctx, reinterpret_cast<unsigned char*>(out.data()) + n, &tail) : -1;
  EVP_ENCODE_CTX_free(ctx);
  if (ok < 0 || fin < 0) throw bad(at, cat(at, ": the data URL's base64 does not decode"));
  out.resize(static_cast<size_t>(n + tail));
  if (out.empty()) throw bad(at, cat(at, ": the data URL holds no bytes"));
  return out;
}

// A field's value, when present and not null.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double lo, double hi, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) throw bad(name, cat(name, " must be a number, got ", kind(*v)));
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) throw bad(name, cat(name, " must be in [", lo, ", ", hi, "], got ", x));
  return x;
}

int64_t integer(const json& body, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number_integer() && !v->is_number_unsigned())
    throw bad(name, cat(name, " must be an integer, got ", kind(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
    throw bad(name, cat(name, " must be at most ", hi, ", got ", v->get<uint64_t>()));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) throw bad(name, cat(name, " must be in [", lo, ", ", hi, "], got ", x));
  return x;
}

bool boolean(const json& body, const char* name, bool fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_boolean()) throw bad(name, cat(name, " must be a boolean, got ", kind(*v)));
  return v->get<bool>();
}

void check_fields(const json& body, const std::set<std::string>& known) {
  if (!body.is_object()) throw bad("", cat("the request body must be a JSON object, got ", kind(body)));
  for (const auto& [k, v] : body.items())
    if (!known.count(k)) throw bad(k, cat("unrecognized request argument: '", k, "'"));
}

// A field onyx accepts only at its default (a feature it does not have).
void only_default(const json& body, const char* name, const json& fallback, const char* what) {
  const json* v = field(body, name);
  if (v && *v != fallback) throw bad(name, cat(name, ": ", what, " is not supported by onyx"));
}

// The fields completions and chat share: sampling, stop, stream, n.
void common(const json& body, Parsed& p) {
  const json* model = field(body, "model");
  if (!model) throw bad("model", "model is required");
  if (!model->is_string()) throw bad("model", cat("model must be a string, got ", kind(*model)));
  p.model = model->get<std::string>();
  genai::SearchOptions& s = p.search;
  s.temperature = number(body, "temperature", 0, 2, 1.0);
  s.top_p = number(body, "top_p", 0, 1, 1.0);
  if (field(body, "top_p") && s.top_p == 0) throw bad("top_p", "top_p must be in (0, 1], got 0");
  const int64_t top_k = integer(body, "top_k", -1, 1 << 30, 0);
  s.top_k = static_cast<int>(std::max<int64_t>(top_k, 0));  // -1 (vLLM) and 0: no top-k
  s.min_p = number(body, "min_p", 0, 1, 0.0);
  s.repetition_penalty = number(body, "repetition_penalty", 1e-6, 1e6, 1.0);
  s.presence_penalty = number(body, "presence_penalty", -2, 2, 0.0);
  s.frequency_penalty = number(body, "frequency_penalty", -2, 2, 0.0);
  s.do_sample = s.temperature > 0;
  if (const json* seed = field(body, "seed")) {
    if (!seed->is_number_integer() && !seed->is_number_unsigned())
      throw bad("seed", cat("seed must be an integer, got ", kind(*seed)));
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : static_cast<uint64_t>(seed->get<int64_t>());
  } else {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    s.seed = rng();  // unseeded requests draw differently each time, as OpenAI's do
  }
  if (const json* stop = field(body, "stop")) {
    std::vector<std::string> list;
    if (stop->is_string()) {
      list.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 4) throw bad("stop", cat("stop takes at most 4 strings, got ", stop->size()));
      for (const auto& x : *stop) {
        if (!x.is_string()) throw bad("stop", cat("stop must hold strings, got ", kind(x)));
        list.push_back(x.get<std::string>());
      }
    } else {
      throw bad("stop", cat("stop must be a string or an array of strings, got ", kind(*stop)));
    }
    for (const auto& x : list)
      if (x.empty()) throw bad("stop", "a stop string is empty");
    s.stop = std::move(list);
  }
  const int64_t n = integer(body, "n", 1, 128, 1);
  if (n != 1) throw bad("n", cat("n: onyx generates one choice per request, got ", n));
  p.stream = boolean(body, "stream", false);
  p.ignore_eos = boolean(body, "ignore_eos", false);
  if (const json* so = field(body, "stream_options")) {
    if (!p.stream) throw bad("stream_options", "stream_options is only allowed when stream is true");
    if (!so->is_object()) throw bad("stream_options", cat("stream_options must be an object, got ", kind(*so)));
    for (const auto& [k, v] : so->items())
      if (k != "include_usage") throw bad("stream_options", cat("unrecognized stream option: '", k, "'"));
    p.include_usage = boolean(*so, "include_usage", false);
  }
  if (const json* lb = field(body, "logit_bias"))
    if (!lb->is_object() || !lb->empty()) throw bad("logit_bias", "logit_bias is not supported by onyx");
  if (const json* u = field(body, "user"))
    if (!u->is_string()) throw bad("user", cat("user must be a string, got ", kind(*u)));
  try {
    genai::check_search_options(s);
  } catch (const Error& e) {
    throw bad("", e.what());
  }
}

void max_tokens(const json& body, Parsed& p, const char* name, int64_t fallback) {
  const json* v = field(body, name);
  if (!v) {
    if (!p.max_tokens_given) p.search.max_new_tokens = fallback;
    return;
  }
  p.search.max_new_tokens = integer(body, name, 1, int64_t{1} << 40, fallback);
  p.max_tokens_given = true;
  p.max_tokens_field = name;
}

}  // namespace

Parsed parse_completion(const json& body) {
  check_fields(body, {"model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "n", "stream",
                      "stream_options", "stop", "seed", "presence_penalty", "frequency_penalty",
                      "repetition_penalty", "logprobs", "echo", "best_of", "logit_bias", "suffix", "user", "ignore_eos"});
  Parsed p;
  common(body, p);
  max_tokens(body, p, "max_tokens", 16);  // OpenAI's default for completions
  only_default(body, "echo", false, "echo");
  only_default(body, "logprobs", nullptr, "logprobs");
  only_default(body, "suffix", nullptr, "suffix");
  if (const json* b = field(body, "best_of"))
    if (*b != 1) throw bad("best_of", "best_of: onyx generates one candidate per request");
  const json* prompt = field(body, "prompt");
  if (!prompt) throw bad("prompt", "prompt is required");
  auto ids_of = [&](const json& a) {
    std::vector<int64_t> ids;
    for (const auto& x : a) {
      if (!x.is_number_integer() && !x.is_number_unsigned())
        throw bad("prompt", cat("a token-id prompt must hold integers, got ", kind(x)));
      ids.push_back(x.get<int64_t>());
    }
    if (ids.empty()) throw bad("prompt", "the prompt has no tokens");
    return ids;
  };
  if (prompt->is_string()) {
    p.prompt_text = prompt->get<std::string>();
  } else if (prompt->is_array() && !prompt->empty() && ((*prompt)[0].is_number())) {
    p.prompt_ids = ids_of(*prompt);
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    p.prompt_text = (*prompt)[0].get<std::string>();
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_array()) {
    p.prompt_ids = ids_of((*prompt)[0]);
  } else if (prompt->is_array() && prompt->size() > 1) {
    throw bad("prompt", cat("prompt: onyx takes one prompt per request, got ", prompt->size()));
  } else {
    throw bad("prompt", cat("prompt must be a string, an array of token ids, or an array of one of them, got ",
                            kind(*prompt)));
  }
  if (p.prompt_ids.empty() && p.prompt_text.empty()) throw bad("prompt", "the prompt is empty");
  return p;
}

Parsed parse_chat(const json& body, const ChatFormatter& chat, bool images_allowed) {
  check_fields(body, {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
                      "min_p", "n", "stream", "stream_options", "stop", "seed", "presence_penalty",
                      "frequency_penalty", "repetition_penalty", "logprobs", "top_logprobs", "logit_bias", "user",
                      "response_format", "tools", "tool_choice", "parallel_tool_calls", "ignore_eos"});
  Parsed p;
  common(body, p);
  max_tokens(body, p, "max_completion_tokens", int64_t{1} << 40);  // default: until the context is full
  max_tokens(body, p, "max_tokens", int64_t{1} << 40);
  only_default(body, "logprobs", false, "logprobs");
  only_default(body, "top_logprobs", nullptr, "top_logprobs");
  if (const json* rf = field(body, "response_format"))
    if (!rf->is_object() || rf->value("type", "") != "text")
      throw bad("response_format", "response_format: onyx produces text ({\"type\": \"text\"})");
  json extra = json::object();
  if (const json* tools = field(body, "tools")) {
    if (!tools->is_array()) throw bad("tools", cat("tools must be an array, got ", kind(*tools)));
    extra["tools"] = *tools;
  }
  if (const json* tc = field(body, "tool_choice"))
    if (*tc != "auto" && *tc != "none")
      throw bad("tool_choice", "tool_choice: onyx takes \"auto\" or \"none\" (the template decides how tools are shown)");
  const json* messages = field(body, "messages");
  if (!messages) throw bad("messages", "messages is required");
  if (!messages->is_array() || messages->empty())
    throw bad("messages", cat("messages must be a non-empty array, got ", kind(*messages)));
  json list = json::array();
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string at = cat("messages[", i, "]");
    if (!m.is_object()) throw bad(at, cat(at, " must be an object, got ", kind(m)));
    const json* role = field(m, "role");
    if (!role || !role->is_string()) throw bad(at + ".role", cat(at, ".role must be a string"));
    static const std::set<std::string> roles{"system", "developer", "user", "assistant", "tool"};
    if (!roles.count(role->get<std::string>()))
      throw bad(at + ".role", cat(at, ".role '", role->get<std::string>(),
                                  "' is not one of system, developer, user, assistant, tool"));
    json out = m;
    const json* content = field(m, "content");
    if (content && content->is_array()) {  // content parts: text, and images as data URLs
      std::string text;
      json parts = json::array();
      bool images = false;
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string pat = cat(at, ".content[", k, "]");
        const std::string type = part.is_object() ? part.value("type", "") : "";
        if (type == "image_url") {
          if (!images_allowed)
            throw bad(pat, cat(pat, ": this model takes no images (its folder names no vision model): send text parts "
                               "only"));
          const json* iu = field(part, "image_url");
          const json* url = iu && iu->is_object() ? field(*iu, "url") : iu;
          if (!url || !url->is_string())
            throw bad(pat, cat(pat, ": an image_url part is {\"type\": \"image_url\", \"image_url\": {\"url\": ...}}"));
          p.images.push_back(data_url_bytes(url->get<std::string>(), pat + ".image_url.url"));
          parts.push_back({{"type", "image"}});
          images = true;
          continue;
        }
        if (type != "text" || !part.contains("text") || !part["text"].is_string())
          throw bad(pat, cat(pat, ": onyx takes text parts ({\"type\": \"text\", \"text\": ...}) and image_url parts"));
        text += part["text"].get<std::string>();
        parts.push_back({{"type", "text"}, {"text", part["text"]}});
      }
      // A message with images keeps its parts for the template (which places the model's image
      // token); one of text only is its text, as a string.
      out["content"] = images ? parts : json(text);
    } else if (content && !content->is_string()) {
      throw bad(at + ".content", cat(at, ".content must be a string or an array of text and image_url parts, got ",
                                     kind(*content)));
    } else if (!content && !m.contains("tool_calls")) {
      throw bad(at + ".content", cat(at, " has no content"));
    }
    if (role->get<std::string>() == "developer") out["role"] = "system";
    list.push_back(std::move(out));
  }
  try {
    p.prompt_text = chat.render(list, extra);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw bad("messages", cat("the model's chat template refused the messages: ", e.what()));
  }
  p.add_special_tokens = false;  // the template writes them
  return p;
}

}  // namespace onyx::serve
