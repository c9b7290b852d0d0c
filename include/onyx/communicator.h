// The collectives of a tensor-parallel group (passes/shard.h): every rank's session holds the
// same communicator, and each rank's graph calls the same collectives in the same order, one
// call per rank each.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "onyx/dtype.h"

namespace onyx {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int world() const = 0;
  // The CUDA device rank `rank` runs on, for a group whose ranks are GPUs; -1 for host ranks.
  // A rank's session must run on that device.
  virtual int device(int rank) const { (void)rank; return -1; }
  // y = the sum over the ranks of each rank's x (`count` float32 values). x and y may be one
  // buffer. Returns when every rank has called it; throws onyx::Error when the others do not
  // come (a rank failed before its call), naming the collective.
  virtual void all_reduce_sum(int rank, const float* x, float* y, size_t count) = 0;
  // y = every rank's x (`bytes` each), in rank order: rank r's at y + r * bytes.
  virtual void all_gather(int rank, const void* x, void* y, size_t bytes) = 0;
  // Breaks the group: collectives waiting now and later throw, saying `why` (a rank failed, so
  // its partners must not wait for it).
  virtual void abort(const std::string& why) = 0;
  // Makes an aborted group whole again, once every rank has left its collectives (none is in one
  // now): the next collectives run. Ranks that are threads only; a GPU group stays broken (its
  // NCCL communicators are gone, and the captured graphs hold them).
  virtual void reset() {}
  // The same collectives in device memory, enqueued on `stream` (the rank's cudaStream_t), for a
  // group whose ranks are GPUs; a group of host ranks refuses them, and the other way round.
  // all_reduce_sum_device takes float32, float16 and bfloat16.
  virtual void all_reduce_sum_device(int rank, const void* x, void* y, size_t count, DType dtype, void* stream);
  virtual void all_gather_device(int rank, const void* x, void* y, size_t bytes, void* stream);
};

// Ranks that are threads of this process, each running its own session (the CPU; the
// tensor-parallel tests). A collective waits at most `timeout` for the other ranks, then throws
// on the ranks that came (the group is then broken: later collectives throw at once).
std::shared_ptr<Communicator> make_thread_communicator(int world,
                                                       std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Ranks that are GPUs of this process, rank r on cuda:devices[r], joined by NCCL. NCCL is opened
// by the first group made: from `library` when given (a path), else libnccl.so.2 where the
// loader looks; an error names what is missing. Each rank's session runs on its device and its
// collectives run on the GPU. CUDA builds only.
std::shared_ptr<Communicator> make_nccl_communicator(const std::vector<int>& devices, const std::string& library = "");

// The process's communicators by number, for the collective ops' nodes (attribute
// `communicator`): registered by the sharding pass, held alive by the sessions' options.
int64_t register_communicator(const std::shared_ptr<Communicator>& c);
std::shared_ptr<Communicator> find_communicator(int64_t id);  // null when gone

}  // namespace onyx
