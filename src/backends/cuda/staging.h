// The one path by which host bytes reach the device (L10): copy into a pinned
// staging buffer, enqueue the copy on the stream, and hand the buffer back to the
// pool only after an event says the copy has read it.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "backends/cuda/device_allocator.h"

namespace onyx::cuda {

class Staging {
 public:
  Staging(PinnedAllocator& pinned, cudaStream_t stream) : pinned_(pinned), stream_(stream) {}
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Enqueues host -> device on the stream; `src` may be reused as soon as this returns.
  void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
  // Device -> host; returns when the bytes have arrived.
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
  size_t pooled_bytes() const;
  size_t in_flight() const;

 private:
  struct Buffer {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
    bool in_flight = false;
  };
  Buffer& acquire(size_t bytes);

  PinnedAllocator& pinned_;
  cudaStream_t stream_;
  std::vector<Buffer> buffers_;
};

}  // namespace onyx::cuda
