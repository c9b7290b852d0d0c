// libFuzzer target: bytes -> an ONNX model -> a session -> one run on small inputs.
// An onyx::Error anywhere is a normal outcome; a crash, a sanitizer report, a leak or a
// hang is a finding. The session is held to a small host-memory budget and the run to a
// deadline so that a model which asks for too much fails with an error rather than a hang.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "onyx/error.h"
#include "onyx/session.h"

namespace {

constexpr size_t kHostBudget = size_t{256} << 20;  // the session's host-memory budget
constexpr double kRunTimeout = 1.0;                // seconds
constexpr int64_t kMaxInputElements = int64_t{1} << 20;

// A value for every element of `t`: small integers (valid as indices, axes, shapes and
// counts more often than not), floats in [-2, 2], booleans, short strings.
void fill(onyx::Tensor& t, std::mt19937& rng) {
  using onyx::DType;
  const int64_t n = t.numel();
  if (n == 0) return;  // an empty tensor has no storage to write
  std::uniform_int_distribution<int> small(0, 2);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  switch (t.dtype()) {
    case DType::kFloat32: for (auto& v : t.span<float>()) v = real(rng); break;
    case DType::kFloat64: for (auto& v : t.span<double>()) v = real(rng); break;
    case DType::kFloat16: for (auto& v : t.span<onyx::Float16>()) v = onyx::Float16(real(rng)); break;
    case DType::kBFloat16: for (auto& v : t.span<onyx::BFloat16>()) v = onyx::BFloat16(real(rng)); break;
    case DType::kBool: for (auto& v : t.span<bool>()) v = small(rng) != 0; break;
    case DType::kString:
      for (auto& v : t.span<std::string>()) v = std::string(size_t(small(rng)), 'a');
      break;
    case DType::kComplex64: case DType::kComplex128: {
      auto* p = static_cast<unsigned char*>(t.raw());
      std::memset(p, 0, t.bytes());
      break;
    }
    default: {  // integers of every width: 0, 1 or 2 in the element's bytes (little-endian)
      const size_t width = onyx::dtype_size(t.dtype());
      auto* p = static_cast<unsigned char*>(t.raw());
      std::memset(p, 0, t.bytes());
      for (int64_t i = 0; i < n; ++i) p[size_t(i) * width] = static_cast<unsigned char>(small(rng));
    }
  }
}

// FUZZ_VERBOSE=1 in the environment prints where each input stopped (for replaying one).
void note(const char* stage, const char* what) {
  static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "fuzz_load: %s: %s\n", stage, what);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  onyx::SessionOptions options;
  options.host_memory_budget_bytes = kHostBudget;
  options.log = [](const std::string&) {};
  std::unique_ptr<onyx::Session> session;
  try {
    // External data resolves against a folder that does not exist: no file of this machine is read.
    session = onyx::Session::load_from_bytes(data, size, options, "/nonexistent/onyx-fuzz");
  } catch (const onyx::Error& e) {
    note("load", e.what());
    return 0;
  }

  std::mt19937 rng(20261201);
  std::uniform_int_distribution<int64_t> dim(1, 2);
  std::map<std::string, int64_t> symbols;  // one size per symbolic dimension name
  onyx::NamedTensors feeds;
  for (const auto& in : session->inputs()) {
    if (!in.is_tensor) return note("skipped", "an input is not a tensor"), 0;  // sequences, maps, optionals
    if (in.has_default) continue;
    if (in.dtype == onyx::DType::kUndefined) return 0;
    std::vector<int64_t> dims;
    if (in.rank_known) {
      for (size_t i = 0; i < in.dims.size(); ++i) {
        int64_t d = in.dims[i];
        if (d < 0) {
          const std::string& name = i < in.dim_params.size() ? in.dim_params[i] : std::string();
          if (name.empty()) d = dim(rng);
          else if (auto it = symbols.find(name); it != symbols.end()) d = it->second;
          else d = symbols[name] = dim(rng);
        }
        dims.push_back(d);
      }
    } else {
      dims.push_back(dim(rng));
    }
    int64_t numel = 1;
    for (int64_t d : dims) {
      if (d != 0 && numel > kMaxInputElements / d) return 0;  // a declared input too large to feed
      numel *= d;
    }
    try {
      onyx::Tensor t(in.dtype, onyx::Shape(dims));
      fill(t, rng);
      feeds.emplace_back(in.name, std::move(t));
    } catch (const onyx::Error&) {
      return 0;
    }
  }

  onyx::RunOptions run;
  run.timeout_seconds = kRunTimeout;
  try {
    session->run(feeds, run);
    note("run", "ok");
  } catch (const onyx::Error& e) {
    note("run", e.what());
  }
  return 0;
}
