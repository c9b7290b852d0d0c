#include <cctype>

#include "backends/backend.h"
#include "backends/cuda_entry.h"
#include "onyx/error.h"

namespace onyx {

Device resolve_device(const std::string& spec) {
  if (spec == "cpu") return Device::cpu();
  int index = 0;
  if (spec.rfind("cuda", 0) != 0) throw Error(cat("unknown device '", spec, "' (expected cpu, cuda or cuda:N)"));
  if (spec.size() > 4) {
    std::string n = spec.substr(spec.size() > 5 && spec[4] == ':' ? 5 : 4);
    bool digits = spec[4] == ':' && !n.empty();
    for (char c : n) digits &= std::isdigit(static_cast<unsigned char>(c)) != 0;
    if (!digits || n.size() > 4) throw Error(cat("unknown device '", spec, "' (expected cpu, cuda or cuda:N)"));
    index = std::stoi(n);
  }
  std::string why;
  int count = cuda_device_count(&why);
  if (count == 0) throw Error(cat("device '", spec, "' is not available: ", why, "; available: cpu"));
  if (index >= count) {
    std::string have = "cpu";
    for (int i = 0; i < count; ++i) have += cat(", cuda:", i);
    throw Error(cat("device '", spec, "' does not exist: this machine has ", count, " CUDA device", count == 1 ? "" : "s",
                    "; available: ", have));
  }
  return Device::cuda(index);
}

std::unique_ptr<Backend> make_backend(Device device, const SessionOptions& options) {
  if (device.is_cpu()) return nullptr;
  return make_cuda_backend(device.index, options);
}

}  // namespace onyx
