// What the core asks of an accelerator backend. The core never names CUDA: a build
// without it links a stub whose factory explains why there is no such device.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "onyx/device.h"
#include "onyx/governor.h"
#include "ops/op.h"

namespace onyx {

// Work recorded once from a backend's stream and replayed there. It owns every host
// staging buffer its copies read (L1): they live exactly as long as it does.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  // Enqueues the recorded work on the backend's stream.
  virtual void replay() = 0;
  // "" while every host buffer a recorded copy reads still holds what it held at capture.
  virtual std::string check_staging() const = 0;
  virtual size_t retained_staging_bytes() const = 0;
  // Validation mode: "" while the retained buffers' bytes hash as they did at capture.
  virtual std::string verify_staging_checksums() const = 0;
  virtual size_t retained_staging_buffers() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Memory for values on this device (plan arenas and run-time values).
  virtual Allocator& allocator() = 0;
  // Memory for weights, uploaded once per session.
  virtual Allocator& weights_allocator() = 0;
  // The device's budget, from which every standing pool of this backend leases.
  virtual MemoryGovernor& governor() = 0;
  virtual size_t alignment() const = 0;
  // Whether the backend has a kernel for the node's op at all (types aside).
  virtual bool has_kernel(const Node& node) const = 0;
  // "" when this backend can run `node` on inputs of these types, else why not.
  virtual std::string unsupported_reason(const Node& node, const std::vector<ValueType>& inputs) const = 0;
  // Runs (enqueues) the node's kernel; outputs are allocated on this device.
  virtual void run(KernelContext& ctx) = 0;
  // Host -> device through the backend's staging path; the host bytes may be reused on return.
  virtual void copy_from_host(void* device_dst, const void* host_src, size_t bytes) = 0;
  // Device -> host; returns when the bytes are on the host.
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // The backend's stream (a cudaStream_t for CUDA), for callers that order their own work on it.
  virtual void* stream_handle() = 0;
  // A table of the memory this backend holds, by holder.
  virtual std::string memory_report() const = 0;

  // Runs `record` with the stream capturing, and returns the instantiated graph.
  // While it runs, allocating from the backend's pools throws, and a free or a
  // synchronizing copy is recorded as a violation (see take_capture_violation).
  virtual std::unique_ptr<CapturedWork> capture(const std::function<void()>& record) = 0;
  // What went wrong during the current capture that could not throw where it
  // happened (a free in a destructor); "" when nothing did. Clears it.
  virtual std::string take_capture_violation() = 0;
  // Test-only: staging buffers used under capture go back to the pool as eager ones
  // do, instead of to the captured graph (the failure of seed 000, for its test).
  virtual void set_release_staging_under_capture(bool release) = 0;
  // Reads and clears the device error word (synchronizes): "" or which op families
  // met an out-of-range index since the last call.
  virtual std::string take_device_errors() = 0;
  // Fills `bytes` of device memory at `ptr` with a pattern that reads as NaN (validation mode).
  virtual void poison(void* ptr, size_t bytes) = 0;
};

struct CudaOptions {
  // Budget of device memory for this session: 0 means a fraction of what is free at first use.
  size_t memory_budget_bytes = 0;
  double memory_fraction = 0.9;
  // Budget of page-locked host memory for staging.
  size_t pinned_budget_bytes = 1ull << 30;
};

// How many CUDA devices this process can use; when none, `why` says why.
int cuda_device_count(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(int index, const CudaOptions& options);

}  // namespace onyx
