// Python dicts as onyx's options: a session's (SessionOptions) and a generation's
// (genai::SearchOptions). An unknown key, or a value of the wrong type, is an error that names it.
#include "options.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "onyx/error.h"

namespace onyx::py {

SessionOptions parse_options(const nb::dict& o) {
  SessionOptions s;
  for (auto [k, v] : o) {
    std::string key = nb::cast<std::string>(k);
    with_context(cat("session option '", key, "'"), [&] {
      if (key == "device") s.device = nb::cast<std::string>(v);
      else if (key == "allow_cpu_fallback") s.allow_cpu_fallback = nb::cast<bool>(v);
      else if (key == "memory_budget_bytes") s.memory_budget_bytes = nb::cast<size_t>(v);
      else if (key == "memory_fraction") s.memory_fraction = nb::cast<double>(v);
      else if (key == "validate_replays") s.validate_replays = nb::cast<bool>(v);
      else if (key == "fold_constants") s.fold_constants = nb::cast<bool>(v);
      else if (key == "fuse_patterns") s.fuse_patterns = nb::cast<bool>(v);
      else if (key == "position_tables") s.position_tables = nb::cast<bool>(v);
      else if (key == "intra_op_threads") {
        const int t = nb::cast<int>(v);
        ONYX_CHECK(t >= 0, "intra_op_threads must be >= 0 (0: every available CPU), not ", t);
        s.intra_op_threads = t;
      }
      else if (key == "fuse_attention" || key == "fuse_linear" || key == "fuse_rotary_cache" ||
               key == "fuse_rotary_attention") {
        auto& field = key == "fuse_attention"      ? s.fuse_attention
                      : key == "fuse_linear"       ? s.fuse_linear
                      : key == "fuse_rotary_cache" ? s.fuse_rotary_cache
                                                   : s.fuse_rotary_attention;
        if (v.is_none()) field.reset();
        else field = nb::cast<bool>(v);
      }
      else if (key == "overlap_launches") s.overlap_launches = nb::cast<bool>(v);
      else if (key == "host_memory_budget_bytes") s.host_memory_budget_bytes = nb::cast<size_t>(v);
      else if (key == "plan_cache_capacity") s.plan_cache_capacity = nb::cast<size_t>(v);
      else if (key == "pinned_memory_budget_bytes") s.pinned_memory_budget_bytes = nb::cast<size_t>(v);
      else if (key == "capture") {
        std::string c = nb::cast<std::string>(v);
        if (c == "off") s.capture = CaptureMode::kOff;
        else if (c == "auto") s.capture = CaptureMode::kAuto;
        else if (c == "require") s.capture = CaptureMode::kRequire;
        else throw Error(cat("'", c, "' is not one of off, auto, require"));
      } else if (key == "memory") {
        std::string m = nb::cast<std::string>(v);
        if (m == "planned") s.memory = MemoryMode::kPlanned;
        else if (m == "release") s.memory = MemoryMode::kRelease;
        else if (m == "keep") s.memory = MemoryMode::kKeepAll;
        else throw Error(cat("'", m, "' is not one of planned, release, keep"));
      } else {
        throw Error(
            "no such option (device, allow_cpu_fallback, memory_budget_bytes, memory_fraction, "
            "validate_replays, fold_constants, fuse_patterns, intra_op_threads, fuse_attention, fuse_linear, "
            "fuse_rotary_cache, fuse_rotary_attention, position_tables, "
            "overlap_launches, host_memory_budget_bytes, plan_cache_capacity, pinned_memory_budget_bytes, capture, "
            "memory)");
      }
    });
  }
  return s;
}

genai::SearchOptions parse_search(const nb::dict& o) {
  genai::SearchOptions s;
  for (auto [k, v] : o) {
    std::string key = nb::cast<std::string>(k);
    with_context(cat("search option '", key, "'"), [&] {
      if (key == "max_new_tokens") s.max_new_tokens = nb::cast<int64_t>(v);
      else if (key == "do_sample") s.do_sample = nb::cast<bool>(v);
      else if (key == "temperature") s.temperature = nb::cast<double>(v);
      else if (key == "top_k") s.top_k = nb::cast<int>(v);
      else if (key == "top_p") s.top_p = nb::cast<double>(v);
      else if (key == "min_p") s.min_p = nb::cast<double>(v);
      else if (key == "repetition_penalty") s.repetition_penalty = nb::cast<double>(v);
      else if (key == "presence_penalty") s.presence_penalty = nb::cast<double>(v);
      else if (key == "frequency_penalty") s.frequency_penalty = nb::cast<double>(v);
      else if (key == "seed") s.seed = nb::cast<uint64_t>(v);
      else if (key == "stop") s.stop = nb::cast<std::vector<std::string>>(v);
      else if (key == "kv_capacity") s.kv_capacity = nb::cast<int64_t>(v);
      else if (key == "return_logits") s.return_logits = nb::cast<bool>(v);
      else if (key == "run_ahead") s.run_ahead = nb::cast<bool>(v);
      else throw Error("no such option (max_new_tokens, do_sample, temperature, top_k, top_p, min_p, "
                       "repetition_penalty, presence_penalty, frequency_penalty, seed, stop, kv_capacity, "
                       "return_logits, run_ahead)");
    });
  }
  return s;
}

}  // namespace onyx::py
