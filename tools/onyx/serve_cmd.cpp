// onyx serve DIR: the OpenAI-compatible server (src/serve), until SIGINT or SIGTERM.
#include <atomic>
#include <csignal>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli.h"
#include "serve/engine.h"
#include "serve/server.h"

namespace onyx::cli {

namespace {

constexpr const char* kServeUsage = R"(usage: onyx serve DIR [options]

An OpenAI-compatible server for the language-model folder DIR (docs/serving.md):
POST /v1/completions, POST /v1/chat/completions (stream: true for server-sent events),
GET /v1/models, GET /health, GET /metrics (Prometheus).

options:
  --host HOST             address to listen on (default 127.0.0.1)
  --port N                port (default 8080; 0: any free port, printed)
  --device DEVICE         cpu (default), cuda or cuda:N
  --tensor-parallel N     split the decoder over N ranks, threads of this process (builder folders;
                          on the CPU, or one GPU a rank from the --device named, joined by NCCL;
                          docs/tensor-parallel.md)
  --capture off|auto|require
                          on a GPU, replay decode steps from CUDA graphs (default auto)
  --max-batch N           sequences decoding at once: the slots (default 16)
  --max-context N         positions per slot, prompt and generated tokens (default: the
                          model's context length, at most 4096)
  --kv-cache-bytes B      bound the slots' KV cache to B bytes (fewer slots when it binds)
  --max-queue N           requests that may wait for a slot; more get 429 (default 64)
  --prefill-chunk N       prompt tokens per prefill run between decode steps (default 256)
  --no-run-ahead          on a GPU, launch each decode step only once the step before it has given
                          its tokens to the host (default: launch it before, when nothing else
                          waits; the tokens are the same)
  --api-key KEY           require "Authorization: Bearer KEY" (not for /health, /metrics)
  --model-name NAME       the model's id in the API (default: the folder's name)
  --threads N             connections served at once (default: slots + queue + 8)
)";

int g_signal_pipe[2] = {-1, -1};
extern "C" void on_stop_signal(int sig) {
  ssize_t ignored = write(g_signal_pipe[1], &sig, sizeof sig);  // async-signal-safe
  (void)ignored;
}

}  // namespace

int cmd_serve(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << kServeUsage;
    return 0;
  }
  Args a(args);
  if (a.done()) throw UsageError("serve needs a model folder");
  const std::string dir = a.next();
  SessionOptions session;
  session.capture = CaptureMode::kAuto;
  serve::EngineOptions eo;
  serve::ServerOptions so;
  int tensor_parallel = 1;
  auto positive = [&](const std::string& opt, int64_t v) {
    if (v <= 0) throw UsageError(cat(opt, " must be positive, got ", v));
    return v;
  };
  while (!a.done()) {
    const std::string opt = a.next();
    if (opt == "--host") so.host = a.value();
    else if (opt == "--port") {
      const int64_t p = to_int(a.value());
      if (p < 0 || p > 65535) throw UsageError(cat("--port must be in [0, 65535], got ", p));
      so.port = static_cast<int>(p);
    } else if (opt == "--device") session.device = a.value();
    else if (opt == "--tensor-parallel") {
      const int64_t n = to_int(a.value());
      if (n < 1 || n > 64) throw UsageError("--tensor-parallel takes 1 to 64 ranks");
      tensor_parallel = static_cast<int>(n);
    }
    else if (opt == "--capture") {
      const std::string m = a.value();
      if (m == "off") session.capture = CaptureMode::kOff;
      else if (m == "auto") session.capture = CaptureMode::kAuto;
      else if (m == "require") session.capture = CaptureMode::kRequire;
      else throw UsageError(cat("--capture takes off, auto or require, not '", m, "'"));
    } else if (opt == "--max-batch") eo.max_batch = positive(opt, to_int(a.value()));
    else if (opt == "--max-context") eo.max_context = positive(opt, to_int(a.value()));
    else if (opt == "--kv-cache-bytes") eo.kv_cache_bytes = static_cast<size_t>(positive(opt, to_int(a.value())));
    else if (opt == "--max-queue") {
      eo.max_queue = to_int(a.value());
      if (eo.max_queue < 0) throw UsageError("--max-queue must not be negative");
    } else if (opt == "--prefill-chunk") eo.prefill_chunk = positive(opt, to_int(a.value()));
    else if (opt == "--no-run-ahead") eo.run_ahead = false;
    else if (opt == "--api-key") so.api_key = a.value();
    else if (opt == "--model-name") so.model_name = a.value();
    else if (opt == "--threads") so.threads = static_cast<int>(positive(opt, to_int(a.value())));
    else throw UsageError(cat("unknown option '", opt, "'"));
  }
  if (session.device == "cpu" && session.capture == CaptureMode::kAuto) session.capture = CaptureMode::kOff;
  std::signal(SIGPIPE, SIG_IGN);  // a client that went away is a failed write, not the end of the server
  // Tensor parallelism: rank 0 serves; the others, loaded after it (each sharding the decoder for
  // itself), take every step with it on threads of their own (LanguageModel::lead_ranks).
  std::vector<std::string> rank_devices{session.device};
  if (tensor_parallel > 1) rank_devices = tensor_parallel_group(tensor_parallel, session);
  genai::LanguageModel lm(dir, session);
  if (tensor_parallel > 1) {
    ONYX_CHECK(!lm.folder().has_vision, "--tensor-parallel takes decoder-only folders; '", dir, "' has a vision model");
    std::vector<std::unique_ptr<genai::LanguageModel>> others;
    for (int r = 1; r < tensor_parallel; ++r) {
      SessionOptions o = session;
      o.tensor_parallel_rank = r;
      o.device = rank_devices[r];
      others.push_back(with_context(cat("tensor-parallel rank ", r),
                                    [&] { return std::make_unique<genai::LanguageModel>(dir, o); }));
    }
    lm.lead_ranks(std::move(others), session.communicator);
  }
  serve::Metrics metrics;
  serve::Engine engine(lm, eo, metrics);
  serve::Server server(lm, engine, metrics, so);
  const int port = server.bind();
  std::fprintf(stderr,
               "onyx serve: %s on %s, %lld slots of %lld positions (kv cache %s, %s); listening on http://%s:%d\n",
               dir.c_str(),
               tensor_parallel > 1 ? cat(tensor_parallel, " tensor-parallel ranks (", rank_devices.front(), " to ",
                                         rank_devices.back(), ")").c_str()
                                   : lm.device().str().c_str(), static_cast<long long>(engine.slots()),
               static_cast<long long>(engine.context()), std::string(genai::cache_mode_name(lm.cache_mode())).c_str(),
               human_bytes(double(lm.cache_bytes())).c_str(), so.host.c_str(), port);
  std::fflush(stderr);
  // SIGINT and SIGTERM (to whichever thread) write their number to a pipe; a thread of the
  // server's reads it and stops the server: in-flight requests end, then the engine.
  ONYX_CHECK(pipe(g_signal_pipe) == 0, "cannot make a pipe for signals");
  std::thread watcher([&] {
    int sig = 0;
    while (read(g_signal_pipe[0], &sig, sizeof sig) < 0 && errno == EINTR) {
    }
    if (sig > 0) std::fprintf(stderr, "onyx serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  server.serve();
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const int none = 0;  // ends the watcher when no signal came
  ssize_t ignored = write(g_signal_pipe[1], &none, sizeof none);
  (void)ignored;
  watcher.join();
  std::fprintf(stderr, "onyx serve: stopped\n");
  engine.shutdown();
  return 0;
}

}  // namespace onyx::cli
