// The `onyx` command-line program: run a model, or describe it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <string>

#include "onyx/npy.h"
#include "onyx/session.h"

int cmd_tokenize(const std::vector<std::string>& args);  // tokenize_cmd.cpp

namespace {

using onyx::cat;
using onyx::DType;
using onyx::Error;
using onyx::Tensor;

constexpr const char* kUsage = R"(usage:
  onyx run MODEL [options]     run a model and print its outputs and timing
  onyx info MODEL              print inputs, outputs, opsets, initializer bytes, op histogram
  onyx plan MODEL [options]    print the memory plan for given input shapes
  onyx tokenize DIR_OR_JSON TEXT | --decode IDS | --lines FILE
                               encode or decode with a Hugging Face tokenizer.json (onyx tokenize --help)

plan options:
  --shape NAME=1x128           shape of input NAME (repeatable); inputs with fixed shapes may be left out
  --dim NAME=N                 size of symbolic dimension NAME, for inputs without --shape
  --json                       print the plan as JSON
  --values N                   list the N largest values (default 10)

run options:
  --input NAME=FILE.npy        feed input NAME from a .npy file (repeatable)
  --input NAME=random          feed input NAME with random values
                               (with no --input at all, every input is random)
  --dim NAME=N                 size of symbolic dimension NAME for random inputs (default 1)
  --seed N                     seed for random inputs (default: drawn at random, printed)
  --repeat N                   run N more times after the first and report timing (default 0);
                               the outputs shown and saved are the last run's
  --save-outputs DIR           write each output as DIR/NAME.npy (NAME made file-system safe)
  --device DEVICE              cpu (default), cuda or cuda:N
  --no-cpu-fallback            on a GPU, fail instead of running a node without a GPU kernel on the CPU
  --memory-budget BYTES        on a GPU, the session's device-memory budget (default: 90% of free memory)
  --memory-report              print the memory governor's holders after the runs
  --capture off|auto|require   on a GPU, replay repeated input shapes from CUDA graphs (default off)
  --validate-replays           check staged bytes and poison the arena before each replay (slower)
  --memory planned|release|keep
                               planned (default): one arena per input-shape signature, every
                               intermediate at a planned offset; release: allocate each value
                               when produced and free it after its last reader; keep: keep every
                               intermediate until the run ends (debugging)
)";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// NAME=VALUE, as --input, --dim and --shape take them.
std::pair<std::string, std::string> split(const std::string& kv) {
  size_t eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) throw UsageError(cat("expected NAME=VALUE, got '", kv, "'"));
  return {kv.substr(0, eq), kv.substr(eq + 1)};
}

int64_t to_int(const std::string& s) {
  try {
    size_t pos = 0;
    int64_t v = std::stoll(s, &pos);
    if (pos == s.size()) return v;
  } catch (...) {
  }
  throw UsageError(cat("'", s, "' is not an integer"));
}

std::string safe_file_name(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  if (s.empty() || s == "." || s == "..") s = "_" + s;
  return s;
}

Tensor random_tensor(const onyx::ValueDesc& d, const std::map<std::string, int64_t>& dims, std::mt19937_64& rng) {
  ONYX_CHECK(d.is_tensor && d.dtype != DType::kUndefined, "input '", d.name, "' has type ", d.type_str(),
             ", for which onyx cannot make random values");
  ONYX_CHECK(d.rank_known, "input '", d.name, "' has unknown rank; give it with --input");
  std::vector<int64_t> shape;
  for (size_t i = 0; i < d.dims.size(); ++i) {
    if (d.dims[i] >= 0) { shape.push_back(d.dims[i]); continue; }
    std::string p = i < d.dim_params.size() ? d.dim_params[i] : "";
    auto it = dims.find(p);
    shape.push_back(it == dims.end() ? 1 : it->second);
  }
  Tensor t(d.dtype, onyx::Shape(shape));
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (d.dtype) {
      case DType::kFloat32: t.data<float>()[i] = static_cast<float>(normal(rng)); break;
      case DType::kFloat64: t.data<double>()[i] = normal(rng); break;
      case DType::kFloat16: t.data<onyx::Float16>()[i] = onyx::Float16(static_cast<float>(normal(rng))); break;
      case DType::kBFloat16: t.data<onyx::BFloat16>()[i] = onyx::BFloat16(static_cast<float>(normal(rng))); break;
      case DType::kBool: t.data<bool>()[i] = small(rng) % 2; break;
      case DType::kInt64: t.data<int64_t>()[i] = small(rng); break;
      case DType::kInt32: t.data<int32_t>()[i] = small(rng); break;
      case DType::kInt16: t.data<int16_t>()[i] = static_cast<int16_t>(small(rng)); break;
      case DType::kInt8: t.data<int8_t>()[i] = static_cast<int8_t>(small(rng)); break;
      case DType::kUInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(small(rng)); break;
      case DType::kUInt16: t.data<uint16_t>()[i] = static_cast<uint16_t>(small(rng)); break;
      case DType::kUInt32: t.data<uint32_t>()[i] = static_cast<uint32_t>(small(rng)); break;
      case DType::kUInt64: t.data<uint64_t>()[i] = static_cast<uint64_t>(small(rng)); break;
      default: throw Error(cat("cannot make random values of ", onyx::dtype_name(d.dtype)));
    }
  }
  return t;
}

std::string summarize(const Tensor& t) {
  if (t.dtype() == DType::kString || t.numel() == 0) return t.numel() == 0 ? "(empty)" : "(strings)";
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  int64_t nan = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.get_as_double(i);
    if (std::isnan(v)) { ++nan; continue; }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  std::string s = cat("min ", lo, " max ", hi, " mean ", sum / std::max<int64_t>(1, t.numel() - nan));
  if (nan) s += cat(" NaN x", nan);
  s += " [";
  for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 5); ++i) s += cat(i ? ", " : "", t.get_as_double(i));
  return s + (t.numel() > 5 ? ", ...]" : "]");
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) { b /= 1024; ++u; }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return buf;
}

int cmd_info(const std::string& path) {
  onyx::ModelInfo info = onyx::inspect_model(path);
  const onyx::ModelSummary& s = info.summary;
  std::cout << "model: " << s.path << "\n";
  std::cout << "ir_version: " << s.ir_version << (s.producer.empty() ? "" : "  producer: " + s.producer) << "\n";
  std::cout << "opsets:";
  for (const auto& [d, v] : s.opsets) std::cout << " " << (d.empty() ? "ai.onnx" : d) << "=" << v;
  std::cout << "\ninputs:\n";
  for (const auto& d : info.inputs)
    std::cout << "  " << d.name << ": " << d.type_str() << (d.has_default ? " (has a default)" : "") << "\n";
  std::cout << "outputs:\n";
  for (const auto& d : info.outputs) std::cout << "  " << d.name << ": " << d.type_str() << "\n";
  std::cout << "initializers: " << s.initializer_count << " (" << human_bytes(double(s.initializer_bytes)) << ", "
            << s.initializer_bytes << " bytes)\n";
  std::cout << "nodes: " << s.node_count << "\nops:\n";
  std::vector<std::pair<int, std::string>> ops;
  for (const auto& [op, n] : s.op_histogram) ops.emplace_back(-n, op);
  std::sort(ops.begin(), ops.end());
  for (const auto& [n, op] : ops) std::cout << "  " << op << ": " << -n << "\n";
  if (!info.unsupported_ops.empty()) {
    std::cout << "not supported by onyx:";
    for (const auto& op : info.unsupported_ops) std::cout << " " << op;
    std::cout << "\n";
    return 1;
  }
  return 0;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\', o += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else o += c;
  }
  return o;
}

int cmd_plan(const std::string& path, const std::vector<std::string>& args) {
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, int64_t> dims;
  bool json = false;
  size_t top = 10;
  onyx::SessionOptions plan_options;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(cat(args[i], " needs a value"));
      return args[++i];
    };
    if (args[i] == "--shape") {
      auto [name, text] = split(value());
      std::vector<int64_t> d;
      size_t start = 0;
      while (start <= text.size() && !text.empty()) {
        size_t x = text.find('x', start);
        d.push_back(to_int(text.substr(start, x == std::string::npos ? std::string::npos : x - start)));
        if (x == std::string::npos) break;
        start = x + 1;
      }
      shapes[name] = d;
    } else if (args[i] == "--dim") {
      auto [k, v] = split(value());
      dims[k] = to_int(v);
    } else if (args[i] == "--json") {
      json = true;
    } else if (args[i] == "--device") {
      plan_options.device = value();
    } else if (args[i] == "--values") {
      top = static_cast<size_t>(to_int(value()));
    } else {
      throw UsageError(cat("unknown option '", args[i], "'"));
    }
  }
  auto session = onyx::Session::load(path, plan_options);
  for (const auto& d : session->inputs()) {
    if (shapes.count(d.name) || d.has_default || !d.rank_known) continue;
    std::vector<int64_t> s;
    bool complete = true;
    for (size_t i = 0; i < d.dims.size(); ++i) {
      if (d.dims[i] >= 0) { s.push_back(d.dims[i]); continue; }
      auto it = dims.find(i < d.dim_params.size() ? d.dim_params[i] : "");
      complete &= it != dims.end();
      s.push_back(it == dims.end() ? -1 : it->second);
    }
    ONYX_CHECK(complete, "input '", d.name, "' is ", d.type_str(), ": give --shape ", d.name, "=... or --dim for its symbols");
    shapes[d.name] = s;
  }
  onyx::PlanSummary p = session->plan(shapes);
  std::vector<const onyx::PlanSummary::Value*> largest;
  for (const auto& v : p.values)
    if (v.alias_of.empty()) largest.push_back(&v);  // one entry per storage
  std::stable_sort(largest.begin(), largest.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
  if (largest.size() > top) largest.resize(top);
  if (json) {
    std::cout << "{\n  \"model\": \"" << json_escape(path) << "\",\n  \"device\": \"" << p.device
              << "\",\n  \"steps\": " << p.steps
              << ",\n  \"folded_steps\": " << p.folded_steps << ",\n  \"in_place\": " << p.in_place
              << ",\n  \"arena_bytes\": " << p.arena_bytes << ",\n  \"lower_bound_bytes\": " << p.lower_bound_bytes
              << ",\n  \"ratio\": " << p.ratio() << ",\n  \"no_reuse_bytes\": " << p.no_reuse_bytes
              << ",\n  \"alignment\": " << p.alignment << ",\n  \"algorithm\": \"" << p.algorithm
              << "\",\n  \"peak_step\": " << p.peak_step << ",\n  \"peak_node\": \"" << json_escape(p.peak_node)
              << "\",\n  \"dynamic_boundaries\": [";
    for (size_t i = 0; i < p.dynamic_boundaries.size(); ++i) {
      const auto& b = p.dynamic_boundaries[i];
      std::cout << (i ? ",\n    " : "\n    ") << "{\"step\": " << b.step << ", \"node\": \"" << json_escape(b.node)
                << "\", \"reason\": \"" << json_escape(b.reason) << "\"}";
    }
    std::cout << (p.dynamic_boundaries.empty() ? "" : "\n  ") << "],\n  \"largest_values\": [";
    for (size_t i = 0; i < largest.size(); ++i) {
      const auto& v = *largest[i];
      std::cout << (i ? ",\n    " : "\n    ") << "{\"name\": \"" << json_escape(v.name) << "\", \"type\": \""
                << v.type << "\", \"kind\": \"" << v.kind << "\", \"bytes\": " << v.bytes
                << ", \"offset\": " << v.offset << ", \"first\": " << v.first << ", \"last\": " << v.last << "}";
    }
    std::cout << (largest.empty() ? "" : "\n  ") << "]\n}\n";
    return 0;
  }
  std::cout << "model: " << path << "\ninputs:";
  for (const auto& [name, d] : shapes) std::cout << " " << name << "=" << onyx::Shape(d).str();
  std::cout << "\nsteps: " << p.steps << " (" << p.folded_steps << " computed while planning, " << p.in_place
            << " in place)\n";
  std::cout << "arena (" << p.device << "): " << human_bytes(double(p.arena_bytes)) << " (" << p.arena_bytes << " B, "
            << p.algorithm << ", alignment " << p.alignment << ")\n";
  if (p.host_arena_bytes) std::cout << "host arena for CPU fallbacks: " << p.host_arena_bytes << " B\n";
  std::cout << "lower bound: " << human_bytes(double(p.lower_bound_bytes)) << " (" << p.lower_bound_bytes << " B)\n";
  std::printf("R = arena / lower bound: %.4f\n", p.ratio());
  std::cout << "no reuse: " << human_bytes(double(p.no_reuse_bytes)) << " (" << p.no_reuse_bytes << " B)\n";
  std::cout << "most live at step " << p.peak_step << (p.peak_node.empty() ? "" : " (" + p.peak_node + ")") << "\n";
  std::cout << "dynamic boundaries: " << p.dynamic_boundaries.size() << "\n";
  for (const auto& b : p.dynamic_boundaries) std::cout << "  step " << b.step << " " << b.node << ": " << b.reason << "\n";
  std::cout << "largest values:\n";
  for (const auto* v : largest)
    std::cout << "  " << v->name << "  " << v->type << "  " << human_bytes(double(v->bytes)) << "  " << v->kind
              << (v->device == "cpu" ? "" : " on " + v->device)
              << (v->kind == "arena" ? cat(" @", v->offset) : "") << "  steps " << v->first << ".." << v->last
              << (v->alias_of.empty() ? "" : "  shares " + v->alias_of) << (v->in_place ? " (in place)" : "") << "\n";
  return 0;
}

int cmd_run(const std::string& path, const std::vector<std::string>& args) {
  std::vector<std::pair<std::string, std::string>> inputs;
  std::map<std::string, int64_t> dims;
  int repeat = 0;
  std::string save_dir;
  onyx::SessionOptions options;
  bool memory_report = false;
  uint64_t seed = std::random_device{}();
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw UsageError(cat(args[i], " needs a value"));
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--input") inputs.push_back(split(value()));
    else if (a == "--dim") { auto [k, v] = split(value()); dims[k] = to_int(v); }
    else if (a == "--repeat") repeat = static_cast<int>(to_int(value()));
    else if (a == "--seed") seed = static_cast<uint64_t>(to_int(value()));
    else if (a == "--save-outputs") save_dir = value();
    else if (a == "--device") options.device = value();
    else if (a == "--no-cpu-fallback") options.allow_cpu_fallback = false;
    else if (a == "--memory-budget") options.memory_budget_bytes = static_cast<size_t>(to_int(value()));
    else if (a == "--memory-report") memory_report = true;
    else if (a == "--validate-replays") options.validate_replays = true;
    else if (a == "--capture") {
      std::string m = value();
      if (m == "off") options.capture = onyx::CaptureMode::kOff;
      else if (m == "auto") options.capture = onyx::CaptureMode::kAuto;
      else if (m == "require") options.capture = onyx::CaptureMode::kRequire;
      else throw UsageError(cat("--capture takes off, auto or require, not '", m, "'"));
    }
    else if (a == "--memory") {
      std::string m = value();
      if (m == "planned") options.memory = onyx::MemoryMode::kPlanned;
      else if (m == "release") options.memory = onyx::MemoryMode::kRelease;
      else if (m == "keep") options.memory = onyx::MemoryMode::kKeepAll;
      else throw UsageError(cat("--memory takes planned, release or keep, not '", m, "'"));
    }
    else throw UsageError(cat("unknown option '", a, "'"));
  }
  if (repeat < 0) throw UsageError("--repeat must be >= 0");

  auto t0 = std::chrono::steady_clock::now();
  auto session = onyx::Session::load(path, options);
  auto t1 = std::chrono::steady_clock::now();
  std::mt19937_64 rng(seed);
  onyx::NamedTensors feeds;
  bool any_random = inputs.empty();
  if (inputs.empty()) {
    for (const auto& d : session->inputs())
      if (!d.has_default) feeds.emplace_back(d.name, random_tensor(d, dims, rng));
  }
  for (const auto& [name, source] : inputs) {
    if (source == "random") {
      const onyx::ValueDesc* desc = nullptr;
      for (const auto& d : session->inputs()) if (d.name == name) desc = &d;
      ONYX_CHECK(desc, "--input ", name, "=random: '", name, "' is not an input of the model");
      feeds.emplace_back(name, random_tensor(*desc, dims, rng));
      any_random = true;
    } else {
      feeds.emplace_back(name, onyx::read_npy(source));
    }
  }
  if (any_random) std::cout << "random inputs: seed " << seed << "\n";
  for (const auto& [name, t] : feeds) std::cout << "input  " << name << ": " << t.type_str() << "\n";

  auto outputs = session->run(feeds);
  onyx::RunStats first = session->last_run_stats();
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) {
    outputs = session->run(feeds);  // the last run's outputs are printed and saved (a replay, when capturing)
    times.push_back(session->last_run_stats().seconds);
  }
  for (const auto& [name, t] : outputs)
    std::cout << "output " << name << ": " << t.type_str() << "  " << summarize(t) << "\n";
  std::printf("load: %.3f ms\nfirst run: %.3f ms\n", std::chrono::duration<double, std::milli>(t1 - t0).count(),
              first.seconds * 1e3);
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    double mean = 0;
    for (double t : times) mean += t;
    mean /= times.size();
    std::printf("runs: %d  median %.3f ms  min %.3f ms  mean %.3f ms\n", repeat, times[times.size() / 2] * 1e3,
                times.front() * 1e3, mean * 1e3);
  }
  std::cout << "peak intermediate memory: " << human_bytes(double(first.peak_bytes)) << " (" << first.peak_bytes
            << " bytes, " << first.allocations << " allocations)\n";
  std::cout << "device: " << session->device() << "\n";
  if (options.memory == onyx::MemoryMode::kPlanned) {
    onyx::PlanCacheReport pc = session->plan_cache();
    std::cout << "plan cache: " << pc.entries << " plan(s), " << pc.hits << " hits, " << pc.misses << " misses, "
              << pc.evictions << " evictions, arenas " << human_bytes(double(pc.arena_bytes)) << "\n";
  }
  for (const auto& [node, why] : session->cpu_fallbacks()) std::cout << "cpu fallback: " << node << ": " << why << "\n";
  if (memory_report) std::cout << "memory report:\n" << session->memory_report();
  if (options.capture != onyx::CaptureMode::kOff) {
    onyx::CaptureReport c = session->capture_report();
    std::printf("cuda graphs: %zu captured (%.3f ms capturing), %zu replays, %zu eager runs; shared arena %zu B\n",
                c.captures, c.capture_seconds * 1e3, c.replays, c.eager_runs, c.shared_arena_bytes);
  }
  if (!save_dir.empty()) {
    std::filesystem::create_directories(save_dir);
    for (const auto& [name, t] : outputs) {
      std::string file = (std::filesystem::path(save_dir) / (safe_file_name(name) + ".npy")).string();
      onyx::write_npy(file, t);
      std::cout << "saved " << file << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
      std::cout << kUsage;
      return args.empty() ? 2 : 0;
    }
    if (args[0] == "tokenize") return cmd_tokenize(std::vector<std::string>(args.begin() + 1, args.end()));
    if (args.size() < 2) throw UsageError(cat("'", args[0], "' needs a MODEL path"));
    std::vector<std::string> rest(args.begin() + 2, args.end());
    if (args[0] == "run") return cmd_run(args[1], rest);
    if (args[0] == "plan") return cmd_plan(args[1], rest);
    if (args[0] == "info") {
      if (!rest.empty()) throw UsageError(cat("info takes no options, got '", rest[0], "'"));
      return cmd_info(args[1]);
    }
    throw UsageError(cat("unknown command '", args[0], "'"));
  } catch (const UsageError& e) {
    std::cerr << "onyx: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "onyx: error: " << e.what() << "\n";
    return 1;
  }
}
