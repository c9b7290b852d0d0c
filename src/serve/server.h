// `onyx serve`: an OpenAI-compatible HTTP server (cpp-httplib) over the serving Engine.
//   POST /v1/completions, POST /v1/chat/completions   (stream: server-sent events)
//   GET  /v1/models, GET /health, GET /metrics         (Prometheus text)
// Every request is checked before it reaches the engine; a bad one gets a 400 with an
// OpenAI-style error object naming the field, a full queue a 429, and nobody else notices.
#pragma once

#include <memory>
#include <string>

#include "serve/engine.h"
#include "serve/metrics.h"

namespace onyx::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: any free port (printed when listening)
  std::string api_key;        // when set, requests need "Authorization: Bearer KEY" (health and metrics excepted)
  std::string model_name;     // the model's id in the API (default: the folder's name)
  int threads = 0;            // connections served at once (default: slots + queue + 8); a streaming
                              // client holds one for its whole response
  size_t max_body_bytes = 8 << 20;
};

class Server {
 public:
  Server(genai::LanguageModel& model, Engine& engine, Metrics& metrics, const ServerOptions& options);
  ~Server();
  // Binds (an error names the address) and returns the port.
  int bind();
  // Serves until stop() (from another thread or a signal handler's thread).
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx::serve
