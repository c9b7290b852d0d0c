// Linked when onyx is built without the CUDA backend.
#include "backends/cuda_entry.h"
#include "onyx/communicator.h"
#include "onyx/error.h"

namespace onyx {

int cuda_device_count(std::string* why) {
  if (why) *why = "this build of onyx has no CUDA backend (configure with -DONYX_CUDA=ON)";
  return 0;
}

std::unique_ptr<Backend> make_cuda_backend(int index, const SessionOptions&) {
  throw Error(cat("cuda:", index, " is not available: this build of onyx has no CUDA backend"));
}

std::shared_ptr<Communicator> make_nccl_communicator(const std::vector<int>&, const std::string&) {
  throw Error("a GPU tensor-parallel group needs the CUDA backend: this build of onyx has none");
}

}  // namespace onyx
