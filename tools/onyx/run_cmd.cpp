// onyx run MODEL: run a model on given or random inputs, print its outputs and timing
// (or, with --json, one JSON object with timings, plan, capture report and outputs).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "onyx/npy.h"

namespace onyx::cli {

namespace {

struct RunArgs {
  std::vector<std::pair<std::string, std::string>> inputs;  // NAME -> FILE.npy or "random"
  std::map<std::string, int64_t> dims;
  int repeat = 0;
  std::string save_dir;
  SessionOptions session;
  bool memory_report = false;
  bool json = false;
  double timeout_seconds = 0;              // each run's deadline (0: none)
  int profile = -1;                         // --profile N: the N slowest nodes listed (-1: no profile)
  bool device_inputs = false;              // feeds uploaded once, before the runs
  std::vector<std::string> keep_on_device;  // outputs left on the device ("all": every one)
  uint64_t seed = std::random_device{}();
};

std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    size_t c = s.find(',', start);
    std::string item = s.substr(start, c == std::string::npos ? std::string::npos : c - start);
    if (!item.empty()) out.push_back(item);
    if (c == std::string::npos) break;
    start = c + 1;
  }
  return out;
}

RunArgs parse(const std::vector<std::string>& args) {
  RunArgs r;
  Args a(args);
  while (!a.done()) {
    const std::string& opt = a.next();
    if (opt == "--input") r.inputs.push_back(split(a.value()));
    else if (opt == "--dim") {
      auto [k, v] = split(a.value());
      r.dims[k] = to_int(v);
    } else if (opt == "--repeat") r.repeat = static_cast<int>(to_int(a.value()));
    else if (opt == "--seed") r.seed = static_cast<uint64_t>(to_int(a.value()));
    else if (opt == "--save-outputs") r.save_dir = a.value();
    else if (opt == "--device") r.session.device = a.value();
    else if (opt == "--no-cpu-fallback") r.session.allow_cpu_fallback = false;
    else if (opt == "--no-fold") r.session.fold_constants = false;
    else if (opt == "--no-fuse") r.session.fuse_patterns = false;
    else if (opt == "--intra-op-threads") {
      const int64_t t = to_int(a.value());
      if (t < 0 || t > 4096) throw UsageError("--intra-op-threads takes 0 (every available CPU) to 4096");
      r.session.intra_op_threads = static_cast<int>(t);
    }
    else if (opt == "--fuse-attention" || opt == "--fuse-linear" || opt == "--fuse-rotary-cache" ||
             opt == "--fuse-rotary-attention") {
      const std::string v = a.value();
      if (v != "on" && v != "off" && v != "auto")
        throw UsageError(opt + " takes on, off or auto, got '" + v + "'");
      auto& field = opt == "--fuse-attention"      ? r.session.fuse_attention
                    : opt == "--fuse-linear"       ? r.session.fuse_linear
                    : opt == "--fuse-rotary-cache" ? r.session.fuse_rotary_cache
                                                   : r.session.fuse_rotary_attention;
      if (v == "auto") field.reset();
      else field = v == "on";
    }
    else if (opt == "--memory-budget") r.session.memory_budget_bytes = static_cast<size_t>(to_int(a.value()));
    else if (opt == "--memory-report") r.memory_report = true;
    else if (opt == "--host-memory-budget") {
      const int64_t bytes = to_int(a.value());
      if (bytes <= 0) throw UsageError("--host-memory-budget must be a positive number of bytes");
      r.session.host_memory_budget_bytes = static_cast<size_t>(bytes);
    } else if (opt == "--timeout") {
      const std::string v = a.value();
      size_t pos = 0;
      double s = -1;
      try {
        s = std::stod(v, &pos);
      } catch (...) {
        pos = 0;
      }
      if (pos != v.size() || !(s > 0) || !std::isfinite(s))
        throw UsageError(cat("--timeout takes a positive number of seconds, not '", v, "'"));
      r.timeout_seconds = s;
    }
    else if (opt == "--validate-replays") r.session.validate_replays = true;
    else if (opt == "--json") r.json = true;
    else if (opt == "--profile") {
      r.profile = static_cast<int>(to_int(a.value()));
      if (r.profile < 0) throw UsageError("--profile takes the number of nodes to list (0: only the op table)");
    }
    else if (opt == "--device-inputs") r.device_inputs = true;
    else if (opt == "--keep-on-device") {
      for (const auto& n : comma_list(a.value())) r.keep_on_device.push_back(n);
    } else if (opt == "--capture") {
      std::string m = a.value();
      if (m == "off") r.session.capture = CaptureMode::kOff;
      else if (m == "auto") r.session.capture = CaptureMode::kAuto;
      else if (m == "require") r.session.capture = CaptureMode::kRequire;
      else throw UsageError(cat("--capture takes off, auto or require, not '", m, "'"));
    } else if (opt == "--memory") {
      std::string m = a.value();
      if (m == "planned") r.session.memory = MemoryMode::kPlanned;
      else if (m == "release") r.session.memory = MemoryMode::kRelease;
      else if (m == "keep") r.session.memory = MemoryMode::kKeepAll;
      else throw UsageError(cat("--memory takes planned, release or keep, not '", m, "'"));
    } else {
      throw UsageError(cat("unknown option '", opt, "'"));
    }
  }
  if (r.repeat < 0) throw UsageError("--repeat must be >= 0");
  return r;
}

// The feeds: from .npy files, or random (every input when none is named).
NamedTensors make_feeds(const RunArgs& a, const Session& session, bool& any_random) {
  std::mt19937_64 rng(a.seed);
  NamedTensors feeds;
  any_random = a.inputs.empty();
  if (a.inputs.empty())
    for (const auto& d : session.inputs())
      if (!d.has_default) feeds.emplace_back(d.name, random_input(d, a.dims, rng));
  for (const auto& [name, source] : a.inputs) {
    if (source != "random") {
      feeds.emplace_back(name, read_npy(source));
      continue;
    }
    const ValueDesc* desc = nullptr;
    for (const auto& d : session.inputs())
      if (d.name == name) desc = &d;
    ONYX_CHECK(desc, "--input ", name, "=random: '", name, "' is not an input of the model");
    feeds.emplace_back(name, random_input(*desc, a.dims, rng));
    any_random = true;
  }
  return feeds;
}

struct Timing {
  double load_ms = 0, first_ms = 0, median_ms = 0, min_ms = 0, mean_ms = 0;
  int runs = 0;
};

// --profile: each node's time summed over the profiled runs (the repeats; the first run when
// there are none), in the order the nodes first ran.
struct Profile {
  int runs = 0;
  double run_seconds = 0;  // the runs' own times, summed
  std::vector<NodeTime> nodes;
  std::map<std::string, size_t> index;  // node -> position in `nodes`

  void add(const RunStats& s) {
    ++runs;
    run_seconds += s.seconds;
    for (const NodeTime& n : s.nodes) {
      auto [it, fresh] = index.emplace(n.node, nodes.size());
      if (fresh) nodes.push_back({n.node, n.op, 0.0});
      nodes[it->second].seconds += n.seconds;
    }
  }
  struct Op {
    std::string op;
    int count = 0;
    double seconds = 0;
  };
  // Per op type, the slowest first.
  std::vector<Op> by_op() const {
    std::map<std::string, Op> m;
    for (const NodeTime& n : nodes) {
      Op& o = m[n.op];
      o.op = n.op;
      ++o.count;
      o.seconds += n.seconds;
    }
    std::vector<Op> out;
    for (auto& [k, o] : m) out.push_back(o);
    std::stable_sort(out.begin(), out.end(), [](const Op& a, const Op& b) { return a.seconds > b.seconds; });
    return out;
  }
  std::vector<NodeTime> slowest(int n) const {
    std::vector<NodeTime> s = nodes;
    std::stable_sort(s.begin(), s.end(), [](const NodeTime& a, const NodeTime& b) { return a.seconds > b.seconds; });
    if (static_cast<int>(s.size()) > n) s.resize(static_cast<size_t>(n));
    return s;
  }
};

Timing time_runs(const RunArgs& a, Session& session, const NamedTensors& feeds, const RunOptions& ro,
                 NamedTensors& outputs, RunStats& first, Profile& profile) {
  Timing t;
  outputs = session.run(feeds, ro);
  first = session.last_run_stats();
  t.first_ms = first.seconds * 1e3;
  if (a.repeat == 0 && ro.profile) profile.add(first);
  std::vector<double> times;
  for (int r = 0; r < a.repeat; ++r) {
    outputs = session.run(feeds, ro);  // the last run's outputs are printed and saved (a replay, when capturing)
    const RunStats s = session.last_run_stats();
    times.push_back(s.seconds * 1e3);
    if (ro.profile) profile.add(s);
  }
  t.runs = static_cast<int>(times.size());
  if (!times.empty()) {
    std::sort(times.begin(), times.end());
    for (double x : times) t.mean_ms += x;
    t.mean_ms /= static_cast<double>(times.size());
    t.median_ms = times[times.size() / 2];
    t.min_ms = times.front();
  }
  return t;
}

std::map<std::string, std::vector<int64_t>> shapes_of(const NamedTensors& feeds) {
  std::map<std::string, std::vector<int64_t>> s;
  for (const auto& [name, t] : feeds) s[name] = t.shape().dims();
  return s;
}

void print_json(const std::string& path, const RunArgs& a, Session& session, const NamedTensors& feeds,
                const NamedTensors& host_outputs, const Timing& t, const RunStats& first, const Profile& prof,
                const std::vector<std::string>& saved) {
  using J = nlohmann::ordered_json;
  J j;
  j["model"] = path;
  j["device"] = session.device();
  j["seed"] = a.seed;
  j["inputs"] = J::array();
  for (const auto& [name, x] : feeds) j["inputs"].push_back({{"name", name}, {"type", x.type_str()}});
  j["outputs"] = J::array();
  for (const auto& [name, x] : host_outputs) {
    J o = {{"name", name}, {"type", x.type_str()}};
    if (!dtype_is_object(x.dtype()) && x.numel() > 0) {
      Stats st = stats_of(x);
      o["min"] = st.min;
      o["max"] = st.max;
      o["mean"] = st.mean;
      o["nan"] = st.nan;
    }
    j["outputs"].push_back(o);
  }
  j["load_ms"] = t.load_ms;
  j["first_run_ms"] = t.first_ms;
  j["runs"] = {{"count", t.runs}, {"median_ms", t.median_ms}, {"min_ms", t.min_ms}, {"mean_ms", t.mean_ms}};
  j["peak_intermediate_bytes"] = first.peak_bytes;
  j["allocations"] = first.allocations;
  if (a.session.memory == MemoryMode::kPlanned) {
    PlanCacheReport pc = session.plan_cache();
    j["plan_cache"] = {{"entries", pc.entries}, {"hits", pc.hits}, {"misses", pc.misses},
                       {"evictions", pc.evictions}, {"arena_bytes", pc.arena_bytes}};
    PlanSummary p = session.plan(shapes_of(feeds));
    j["plan"] = {{"device", p.device},         {"steps", p.steps},
                 {"folded_steps", p.folded_steps}, {"in_place", p.in_place},
                 {"arena_bytes", p.arena_bytes}, {"lower_bound_bytes", p.lower_bound_bytes},
                 {"host_arena_bytes", p.host_arena_bytes}, {"dynamic_boundaries", p.dynamic_boundaries.size()},
                 {"capture_blocker", p.capture_blocker}};
  }
  j["ops"] = session.summary().op_histogram;  // after load-time folding and fusion
  j["cpu_fallbacks"] = J::array();
  for (const auto& [node, why] : session.cpu_fallbacks())
    j["cpu_fallbacks"].push_back({{"node", node}, {"reason", why}});
  if (a.session.capture != CaptureMode::kOff) {
    CaptureReport c = session.capture_report();
    j["capture"] = {{"captures", c.captures},         {"recaptures", c.recaptures},
                    {"replays", c.replays},           {"eager_runs", c.eager_runs},
                    {"graphs", c.graphs},             {"capture_ms", c.capture_seconds * 1e3},
                    {"shared_arena_bytes", c.shared_arena_bytes},
                    {"retained_staging_bytes", c.retained_staging_bytes}};
  }
  if (a.memory_report) j["memory_report"] = session.memory_report();
  if (a.profile >= 0) {
    const double runs = std::max(prof.runs, 1);
    J ops = J::array(), nodes = J::array();
    for (const auto& o : prof.by_op())
      ops.push_back({{"op", o.op}, {"nodes", o.count}, {"ms_per_run", o.seconds * 1e3 / runs}});
    for (const auto& n : prof.slowest(a.profile))
      nodes.push_back({{"node", n.node}, {"op", n.op}, {"ms_per_run", n.seconds * 1e3 / runs}});
    j["profile"] = {{"runs", prof.runs}, {"run_ms", prof.run_seconds * 1e3 / runs}, {"ops", ops}, {"slowest", nodes}};
  }
  j["saved"] = saved;
  std::cout << j.dump(2) << "\n";
}

// The op table and the slowest nodes, each time a mean over the profiled runs.
void print_profile(const RunArgs& a, const Profile& prof) {
  if (prof.runs == 0 || prof.nodes.empty()) {
    std::cout << "profile: no node times (a run replayed from a CUDA graph runs no nodes one by one)\n";
    return;
  }
  const double runs = prof.runs, run_ms = prof.run_seconds * 1e3 / runs;
  double node_ms = 0;
  for (const auto& n : prof.nodes) node_ms += n.seconds * 1e3 / runs;
  std::printf("profile: %d run(s), %.3f ms a run, %.3f ms of it in nodes (the rest: the executor between them)\n",
              prof.runs, run_ms, node_ms);
  std::printf("  %-34s %6s %11s %7s\n", "op", "nodes", "ms a run", "share");
  for (const auto& o : prof.by_op())
    std::printf("  %-34s %6d %11.3f %6.1f%%\n", o.op.c_str(), o.count, o.seconds * 1e3 / runs,
                run_ms > 0 ? 100.0 * o.seconds * 1e3 / runs / run_ms : 0.0);
  if (a.profile == 0) return;
  std::printf("  slowest nodes:\n");
  for (const auto& n : prof.slowest(a.profile))
    std::printf("  %11.3f ms %6.1f%%  %s\n", n.seconds * 1e3 / runs,
                run_ms > 0 ? 100.0 * n.seconds * 1e3 / runs / run_ms : 0.0, n.node.c_str());
}

void print_text(const RunArgs& a, Session& session, const NamedTensors& host_outputs, const Timing& t,
                const RunStats& first, const Profile& prof, const std::vector<std::string>& saved) {
  for (const auto& [name, x] : host_outputs)
    std::cout << "output " << name << ": " << x.type_str() << "  " << summarize(x) << "\n";
  std::printf("load: %.3f ms\nfirst run: %.3f ms\n", t.load_ms, t.first_ms);
  if (t.runs)
    std::printf("runs: %d  median %.3f ms  min %.3f ms  mean %.3f ms\n", t.runs, t.median_ms, t.min_ms, t.mean_ms);
  std::cout << "peak intermediate memory: " << human_bytes(double(first.peak_bytes)) << " (" << first.peak_bytes
            << " bytes, " << first.allocations << " allocations)\n";
  std::cout << "device: " << session.device() << "\n";
  if (a.session.memory == MemoryMode::kPlanned) {
    PlanCacheReport pc = session.plan_cache();
    std::cout << "plan cache: " << pc.entries << " plan(s), " << pc.hits << " hits, " << pc.misses << " misses, "
              << pc.evictions << " evictions, arenas " << human_bytes(double(pc.arena_bytes)) << "\n";
  }
  for (const auto& [node, why] : session.cpu_fallbacks()) std::cout << "cpu fallback: " << node << ": " << why << "\n";
  if (a.memory_report) std::cout << "memory report:\n" << session.memory_report();
  if (a.session.capture != CaptureMode::kOff) {
    CaptureReport c = session.capture_report();
    std::printf("cuda graphs: %zu captured (%.3f ms capturing), %zu replays, %zu eager runs; shared arena %zu B\n",
                c.captures, c.capture_seconds * 1e3, c.replays, c.eager_runs, c.shared_arena_bytes);
  }
  if (a.profile >= 0) print_profile(a, prof);
  for (const auto& f : saved) std::cout << "saved " << f << "\n";
}

}  // namespace

int cmd_run(const std::string& path, const std::vector<std::string>& args) {
  RunArgs a = parse(args);
  auto t0 = std::chrono::steady_clock::now();
  auto session = Session::load(path, a.session);
  const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  bool any_random = false;
  NamedTensors feeds = make_feeds(a, *session, any_random);
  if (!a.json) {
    if (any_random) std::cout << "random inputs: seed " << a.seed << "\n";
    for (const auto& [name, t] : feeds) std::cout << "input  " << name << ": " << t.type_str() << "\n";
  }
  NamedTensors run_feeds = feeds;
  if (a.device_inputs)
    for (auto& [name, t] : run_feeds) t = session->to_device(t);
  RunOptions ro;
  ro.timeout_seconds = a.timeout_seconds;
  ro.profile = a.profile >= 0;
  for (const auto& name : a.keep_on_device) {
    if (name == "all") ro.outputs = OutputPlace::kDevice;
    else ro.output_places[name] = OutputPlace::kDevice;
  }
  NamedTensors outputs;
  RunStats first;
  Profile prof;
  Timing t = time_runs(a, *session, run_feeds, ro, outputs, first, prof);
  t.load_ms = load_ms;
  for (auto& [name, x] : outputs) x = session->to_host(x);
  std::vector<std::string> saved;
  if (!a.save_dir.empty()) {
    std::filesystem::create_directories(a.save_dir);
    for (const auto& [name, x] : outputs) {
      const std::filesystem::path stem = std::filesystem::path(a.save_dir) / safe_file_name(name);
      if (x.dtype() == DType::kSequence) {  // one file per element: NAME.0.npy, NAME.1.npy, ...
        for (int64_t k = 0; k < x.numel(); ++k) {
          const std::string file = stem.string() + cat(".", k, ".npy");
          write_npy(file, x.elements()[k]);
          saved.push_back(file);
        }
        continue;
      }
      if (x.dtype() == DType::kOptional && x.numel() == 0) continue;  // no value, no file
      const std::string file = stem.string() + ".npy";
      write_npy(file, x.dtype() == DType::kOptional ? x.elements()[0] : x);
      saved.push_back(file);
    }
  }
  if (a.json) print_json(path, a, *session, feeds, outputs, t, first, prof, saved);
  else print_text(a, *session, outputs, t, first, prof, saved);
  return 0;
}

}  // namespace onyx::cli
