// What the core asks of an accelerator backend. The core never names CUDA: it asks
// make_backend() for the device the session resolved, and a build without CUDA links
// a stub whose factory explains why there is no such device.
#pragma once

#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "onyx/device.h"
#include "onyx/governor.h"
#include "onyx/options.h"
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

// Device -> host bytes that the host waits for alone: start() enqueues their copy into pinned
// memory the readback owns and marks the stream after it; wait() blocks until that mark only,
// while work enqueued after it keeps the device busy (a decode step launched before the step
// before it has given its tokens to the host). The device error word as it stood at the mark
// comes with the bytes; finish() still reads, names and clears it.
class DeviceReadback {
 public:
  virtual ~DeviceReadback() = default;
  // Enqueues the copy of `bytes` (at most the capacity) from `device_src`; the readback must not
  // be started and not yet waited for.
  virtual void start(const void* device_src, size_t bytes) = 0;
  // The bytes of the last start(), once they are on the host; `error_word` (when given) gets the
  // device error word of that moment (non-zero: an op family met an out-of-range index).
  virtual const void* wait(unsigned* error_word) = 0;
  // Started and not yet waited for.
  virtual bool pending() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  // Memory for values on this device (plan arenas, run-time values, capture slots).
  virtual Allocator& allocator() = 0;
  // Memory for weights, uploaded once per session.
  virtual Allocator& weights_allocator() = 0;
  // A pool of this device's memory under a holder of its own in the governor (a KV cache).
  virtual std::shared_ptr<Allocator> make_pool(const std::string& holder) = 0;
  // The device's budget, from which every standing pool of this backend leases.
  virtual MemoryGovernor& governor() = 0;
  virtual size_t alignment() const = 0;
  // Makes this backend's device the calling thread's current one (CUDA's current device is per
  // thread): called where a run or a model's step begins, so that sessions on several GPUs may
  // each run on any thread (a tensor-parallel rank's own, or the one that loaded another rank).
  virtual void make_current() {}

  // Whether the backend has a kernel for the node's op at all (types aside): which
  // initializers are uploaded at load.
  virtual bool has_kernel(const Node& node) const = 0;
  // The kernel that runs `node` on inputs of these types, resolved once (at planning)
  // by the same (domain, name, opset) rule as CPU kernels; empty with `why_not` set
  // when this backend cannot run it. The kernel enqueues its work on the stream and
  // its outputs live on this device.
  virtual KernelFn find_kernel(const Node& node, const std::vector<ValueType>& inputs, std::string* why_not) = 0;

  // Host -> device through the staging path, enqueued; the host bytes may be reused on return.
  virtual void copy_from_host(void* device_dst, const void* host_src, size_t bytes) = 0;
  // Device -> host; returns when the bytes are on the host (synchronizes).
  virtual void copy_to_host(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Device -> host, enqueued: the bytes are at `host_dst` once finish() returns.
  virtual void download(void* host_dst, const void* device_src, size_t bytes) = 0;
  // Device -> device, enqueued.
  virtual void copy_on_device(void* device_dst, const void* device_src, size_t bytes) = 0;
  // Several device -> device copies, enqueued (in no particular order among themselves: their
  // ranges must not overlap). A captured step's device feeds go into their slots this way, one
  // launch for all where the backend has one (cudaMemcpyAsync costs the host 5-8 us a call).
  struct DeviceCopy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  virtual void copy_many_on_device(const std::vector<DeviceCopy>& copies) {
    for (const DeviceCopy& c : copies) copy_on_device(c.dst, c.src, c.bytes);
  }
  // A readback of up to `capacity` bytes that the host waits for alone (null: this backend
  // has none; the caller then synchronizes with finish()). See DeviceReadback.
  virtual std::unique_ptr<DeviceReadback> make_readback(size_t capacity) {
    (void)capacity;
    return nullptr;
  }
  // Waits for all enqueued work (one synchronization), completes the downloads, and
  // reads and clears the device error word: "" or which op families met an
  // out-of-range index since the last call.
  virtual std::string finish() = 0;
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
  // Fills `bytes` of device memory at `ptr` with a pattern that reads as NaN (validation mode).
  virtual void poison(void* ptr, size_t bytes) = 0;
  // Fills `bytes` of device memory at `ptr` with zeros, enqueued.
  virtual void zero(void* ptr, size_t bytes) = 0;
};

// The backend of an accelerator device (null for the CPU), from the session's options.
std::unique_ptr<Backend> make_backend(Device device, const SessionOptions& options);

// The copies on `backend`'s device, enqueued as one batch (Backend::copy_many_on_device: no two
// may overlap); with no backend (the memory is the host's), one memcpy each, in order.
inline void copy_all(Backend* backend, const std::vector<Backend::DeviceCopy>& copies) {
  if (backend) {
    backend->copy_many_on_device(copies);
    return;
  }
  for (const Backend::DeviceCopy& c : copies)
    if (c.bytes) std::memcpy(c.dst, c.src, c.bytes);
}

}  // namespace onyx
