#include "serve/server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "genai/image.h"
#include "genai/tokenizer.h"
#include "serve/openai.h"

namespace onyx::serve {

namespace {

using json = nlohmann::ordered_json;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string new_id(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lk(mu);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
  return cat(prefix, buf);
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  if (e.status == 429) res.set_header("Retry-After", "1");
  send_json(res, e.status, {{"error", err}});
}

}  // namespace

struct Server::Impl {
  genai::LanguageModel& model;
  Engine& engine;
  Metrics& metrics;
  ServerOptions options;
  httplib::Server http;
  std::unique_ptr<ChatFormatter> chat;
  int port = -1;

  Impl(genai::LanguageModel& m, Engine& e, Metrics& mt, const ServerOptions& o)
      : model(m), engine(e), metrics(mt), options(o) {
    if (options.model_name.empty())
      options.model_name = std::filesystem::path(model.folder().dir).lexically_normal().filename().string();
    if (options.model_name.empty() || options.model_name == ".")
      options.model_name = std::filesystem::absolute(model.folder().dir).lexically_normal().parent_path().filename().string();
    chat = std::make_unique<ChatFormatter>(model.folder().dir);
    const int threads = options.threads > 0 ? options.threads
                                            : static_cast<int>(engine.slots() + engine.queue_limit() + 8);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    http.set_payload_max_length(options.max_body_bytes);
    http.set_tcp_nodelay(true);  // a streamed token is a small write: send it now, not after the next ACK
    http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      metrics.add(cat("onyx_requests_total{endpoint=\"", endpoint_label(req.path), "\",status=\"", res.status, "\"}"));
    });
    http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, cat("internal error: ", what), "", "server_error"));
    });
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;  // a handler's own error body
      if (res.status == 404)
        send_error(res, ApiError(404, cat("no route ", req.method, " ", req.path), "", "invalid_request_error",
                                 "not_found"));
      else if (res.status == 413)
        send_error(res, ApiError(413, "the request body is too large", "", "invalid_request_error"));
      else if (res.status >= 400)
        send_error(res, ApiError(res.status, cat("HTTP ", res.status), "", "invalid_request_error"));
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      send_json(res, 200, {{"status", "ok"}, {"model", options.model_name}, {"slots", engine.slots()},
                           {"context", engine.context()}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(), "text/plain; version=0.0.4");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      guard(req, res, [&] {
        json m = {{"id", options.model_name}, {"object", "model"}, {"created", created_}, {"owned_by", "onyx"},
                  {"max_model_len", engine.context()}};
        send_json(res, 200, {{"object", "list"}, {"data", json::array({m})}});
      });
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guard(req, res, [&] { complete(req, res, false); });
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      guard(req, res, [&] { complete(req, res, true); });
    });
  }

  static std::string endpoint_label(const std::string& path) {
    static const std::set<std::string> known{"/v1/completions", "/v1/chat/completions", "/v1/models", "/health",
                                             "/metrics"};
    return known.count(path) ? path : "other";
  }

  // Checks the API key, then runs the handler; an ApiError or Error becomes the error response.
  template <class Fn>
  void guard(const httplib::Request& req, httplib::Response& res, Fn&& fn) {
    try {
      if (!options.api_key.empty()) {
        const std::string auth = req.get_header_value("Authorization");
        if (auth != "Bearer " + options.api_key)
          throw ApiError(401, auth.empty() ? "no API key: send 'Authorization: Bearer KEY'" : "the API key is not valid",
                         "", "invalid_request_error", "invalid_api_key");
      }
      fn();
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const Overloaded& e) {
      send_error(res, ApiError(429, e.what(), "", "rate_limit_error", "server_overloaded"));
    } catch (const Error& e) {
      send_error(res, ApiError(400, e.what(), "", "invalid_request_error"));
    }
  }

  void complete(const httplib::Request& req, httplib::Response& res, bool is_chat) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const std::exception& e) {
      throw ApiError(400, cat("the request body is not JSON: ", e.what()), "", "invalid_request_error");
    }
    Parsed p = is_chat ? parse_chat(body, *chat, model.folder().has_vision) : parse_completion(body);
    if (p.model != options.model_name)
      throw ApiError(404, cat("the model '", p.model, "' does not exist; this server serves '", options.model_name, "'"),
                     "model", "invalid_request_error", "model_not_found");
    Completion c;
    c.search = p.search;
    c.ignore_eos = p.ignore_eos;
    if (!p.images.empty()) {
      // Decoded and preprocessed here; the engine's thread runs the vision model.
      for (size_t i = 0; i < p.images.size(); ++i) {
        const std::string& b = p.images[i];
        try {
          c.pixels.push_back(genai::preprocess_image(
              decode_image(reinterpret_cast<const uint8_t*>(b.data()), b.size()), model.image_processor()));
        } catch (const Error& e) {
          throw ApiError(400, cat("image ", i, " of the messages: ", e.what()), "messages", "invalid_request_error");
        }
      }
    }
    if (!p.prompt_ids.empty()) {
      c.prompt = p.prompt_ids;
    } else {
      const auto ids = model.tokenizer().encode(p.prompt_text, !is_chat && p.add_special_tokens);
      c.prompt.assign(ids.begin(), ids.end());
    }
    const int64_t n = static_cast<int64_t>(c.prompt.size());
    const std::string field = is_chat ? "messages" : "prompt";
    if (model.folder().has_vision) {
      // One image per image token of the prompt (the engine expands each to its image's rows).
      const int64_t token = model.folder().vision.image_token_id;
      const auto found = std::count(c.prompt.begin(), c.prompt.end(), token);
      if (found != static_cast<int64_t>(c.pixels.size()))
        throw ApiError(400,
                       cat("the ", field, " holds ", found, " image token", found == 1 ? "" : "s", " ('",
                           model.tokenizer().id_to_token(static_cast<int32_t>(token)).value_or("?"), "') for ",
                           c.pixels.size(), " image", c.pixels.size() == 1 ? "" : "s",
                           ": one image_url part per image token"),
                       field, "invalid_request_error");
    }
    if (n == 0) throw ApiError(400, cat("the ", field, " encodes to no tokens"), field, "invalid_request_error");
    if (n >= engine.context())
      throw ApiError(400,
                     cat("the ", field, " has ", n, " tokens and this server's context is ", engine.context(),
                         " positions (--max-context), so no token could be generated"),
                     field, "invalid_request_error", "context_length_exceeded");
    const int64_t room = engine.context() - n;
    if (p.max_tokens_given && c.search.max_new_tokens > room)
      throw ApiError(400,
                     cat(p.max_tokens_field, " is ", c.search.max_new_tokens, " but the ", field, " has ", n,
                         " tokens and the context is ", engine.context(), " positions: at most ", room, " fit"),
                     p.max_tokens_field, "invalid_request_error", "context_length_exceeded");
    if (!p.max_tokens_given) c.search.max_new_tokens = std::min(c.search.max_new_tokens, room);
    std::shared_ptr<Ticket> t = engine.submit(std::move(c));
    const std::string id = new_id(is_chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = unix_now();
    if (p.stream) return stream(res, t, p, id, created, is_chat);
    std::string text;
    for (bool done = false; !done;) text += t->wait(std::chrono::milliseconds(1000), done);
    if (t->finish == Finish::kError)
      throw ApiError(500, cat("generation failed: ", t->error), "", "server_error");
    if (t->finish == Finish::kCancelled)
      throw ApiError(503, cat("the request was cancelled: ", t->error), "", "server_error");
    json choice = {{"index", 0}, {"finish_reason", std::string(finish_reason(t->finish))}, {"logprobs", nullptr}};
    if (is_chat) choice["message"] = {{"role", "assistant"}, {"content", text}};
    else choice["text"] = text;
    send_json(res, 200,
              {{"id", id},
               {"object", is_chat ? "chat.completion" : "text_completion"},
               {"created", created},
               {"model", options.model_name},
               {"choices", json::array({choice})},
               {"usage", usage(*t)}});
  }

  static json usage(const Ticket& t) {
    return {{"prompt_tokens", t.prompt_tokens},
            {"completion_tokens", t.completion_tokens},
            {"total_tokens", t.prompt_tokens + t.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", t.cached_tokens}}}};
  }

  // Server-sent events: a chunk per piece of text, the finish reason, the usage when asked,
  // then [DONE]. A write that fails means the client went away: the sequence is cancelled.
  void stream(httplib::Response& res, std::shared_ptr<Ticket> t, const Parsed& p, const std::string& id,
              int64_t created, bool is_chat) {
    const std::string model_name = options.model_name;
    auto chunk = [=](const json& delta_or_text, const json& finish) {
      json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
      if (is_chat) choice["delta"] = delta_or_text;
      else choice["text"] = delta_or_text;
      json c = {{"id", id},
                {"object", is_chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model_name},
                {"choices", json::array({choice})}};
      if (p.include_usage) c["usage"] = nullptr;
      return c;
    };
    auto started = std::make_shared<bool>(false);
    const bool include_usage = p.include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [=](size_t, httplib::DataSink& sink) {
          auto send = [&](const json& j) {
            const std::string line = "data: " + j.dump() + "\n\n";
            return sink.write(line.data(), line.size());
          };
          if (is_chat && !*started) {
            *started = true;
            if (!send(chunk({{"role", "assistant"}, {"content", ""}}, nullptr))) return t->cancel(), false;
          }
          bool done = false;
          const std::string text = t->wait(std::chrono::milliseconds(1000), done);
          if (!text.empty()) {
            if (!send(chunk(is_chat ? json{{"content", text}} : json(text), nullptr))) return t->cancel(), false;
          } else if (!done) {
            static const char ping[] = ": keep-alive\n\n";  // finds a client that went away while nothing came
            if (!sink.write(ping, sizeof ping - 1)) return t->cancel(), false;
          }
          if (!done) return true;
          if (t->finish == Finish::kError || t->finish == Finish::kCancelled) {
            json err = {{"error",
                         {{"message", cat(t->finish == Finish::kError ? "generation failed: " : "cancelled: ", t->error)},
                          {"type", "server_error"},
                          {"param", nullptr},
                          {"code", nullptr}}}};
            send(err);
          } else {
            send(chunk(is_chat ? json::object() : json(""), std::string(finish_reason(t->finish))));
            if (include_usage) {
              json u = chunk(is_chat ? json::object() : json(""), nullptr);
              u["choices"] = json::array();
              u["usage"] = usage(*t);
              send(u);
            }
          }
          static const char end[] = "data: [DONE]\n\n";
          sink.write(end, sizeof end - 1);
          sink.done();
          return true;
        },
        [t](bool success) {
          if (!success) t->cancel();
        });
  }

  int64_t created_ = unix_now();
};

Server::Server(genai::LanguageModel& model, Engine& engine, Metrics& metrics, const ServerOptions& options)
    : impl_(std::make_unique<Impl>(model, engine, metrics, options)) {}

Server::~Server() { stop(); }

int Server::bind() {
  Impl& s = *impl_;
  if (s.options.port == 0) s.port = s.http.bind_to_any_port(s.options.host);
  else s.port = s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1;
  ONYX_CHECK(s.port > 0, "cannot listen on ", s.options.host, ":", s.options.port,
             " (in use, or not an address of this machine)");
  return s.port;
}

void Server::serve() { impl_->http.listen_after_bind(); }

void Server::stop() {
  if (impl_) impl_->http.stop();
}

}  // namespace onyx::serve
