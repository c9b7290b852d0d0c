#include "cli.h"
#include "onyx/device.h"
#include "onyx/communicator.h"
#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace onyx::cli {

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

Tensor random_input(const ValueDesc& d, const std::map<std::string, int64_t>& dims, std::mt19937_64& rng) {
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
  Tensor t(d.dtype, Shape(shape));
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> small(0, 9);
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (d.dtype) {
      case DType::kFloat32: t.data<float>()[i] = static_cast<float>(normal(rng)); break;
      case DType::kFloat64: t.data<double>()[i] = normal(rng); break;
      case DType::kFloat16: t.data<Float16>()[i] = Float16(static_cast<float>(normal(rng))); break;
      case DType::kBFloat16: t.data<BFloat16>()[i] = BFloat16(static_cast<float>(normal(rng))); break;
      case DType::kBool: t.data<bool>()[i] = small(rng) % 2; break;
      case DType::kInt64: t.data<int64_t>()[i] = small(rng); break;
      case DType::kInt32: t.data<int32_t>()[i] = small(rng); break;
      case DType::kInt16: t.data<int16_t>()[i] = static_cast<int16_t>(small(rng)); break;
      case DType::kInt8: t.data<int8_t>()[i] = static_cast<int8_t>(small(rng)); break;
      case DType::kUInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(small(rng)); break;
      case DType::kUInt16: t.data<uint16_t>()[i] = static_cast<uint16_t>(small(rng)); break;
      case DType::kUInt32: t.data<uint32_t>()[i] = static_cast<uint32_t>(small(rng)); break;
      case DType::kUInt64: t.data<uint64_t>()[i] = static_cast<uint64_t>(small(rng)); break;
      default: throw Error(cat("cannot make random values of ", dtype_name(d.dtype)));
    }
  }
  return t;
}

Stats stats_of(const Tensor& t) {
  Stats st;
  double lo = INFINITY, hi = -INFINITY, sum = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.get_as_double(i);
    if (std::isnan(v)) {
      ++st.nan;
      continue;
    }
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
  }
  st.min = lo;
  st.max = hi;
  st.mean = sum / std::max<int64_t>(1, t.numel() - st.nan);
  return st;
}

std::string summarize(const Tensor& t) {
  if (t.dtype() == DType::kSequence || t.dtype() == DType::kOptional) {
    std::string s = t.dtype() == DType::kOptional ? (t.numel() ? "(holds " : "(none)") : cat("(", t.numel(), " tensors");
    for (int64_t i = 0; i < std::min<int64_t>(t.numel(), 3); ++i) s += cat(i ? ", " : ": ", t.elements()[i].type_str());
    return t.dtype() == DType::kOptional && !t.numel() ? s : s + (t.numel() > 3 ? ", ...)" : ")");
  }
  if (t.dtype() == DType::kString || t.numel() == 0) return t.numel() == 0 ? "(empty)" : "(strings)";
  Stats st = stats_of(t);
  std::string s = cat("min ", st.min, " max ", st.max, " mean ", st.mean);
  if (st.nan) s += cat(" NaN x", st.nan);
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

std::vector<std::string> tensor_parallel_group(int ranks, SessionOptions& session) {
  std::vector<std::string> devices(ranks, session.device);
  const Device first = resolve_device(session.device);
  std::shared_ptr<Communicator> group;
  if (first.is_cpu()) {
    group = make_thread_communicator(ranks);
  } else {
    std::vector<int> gpus;
    for (int r = 0; r < ranks; ++r) {
      const std::string name = cat("cuda:", first.index + r);
      with_context(cat("--tensor-parallel ", ranks, " from ", first.str(), " takes ", first.str(), " to cuda:",
                       first.index + ranks - 1),
                   [&] { resolve_device(name); });
      gpus.push_back(first.index + r);
      devices[r] = name;
    }
    const char* library = std::getenv("ONYX_NCCL_LIBRARY");
    group = make_nccl_communicator(gpus, library ? library : "");
  }
  session.tensor_parallel_world = ranks;
  session.communicator = group;
  session.device = devices[0];
  return devices;
}

}  // namespace onyx::cli
