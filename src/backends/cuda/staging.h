// The one path by which host bytes reach the device (L10): copy into a pinned
// staging buffer, enqueue the copy on the stream, and hand the buffer back to the
// pool only after an event says the copy has read it. Under stream capture the copy
// becomes a graph node that reads the buffer again at every replay (L1), so the
// buffer leaves the pool and belongs to the capture record, freed with the graph.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/device_allocator.h"

namespace onyx::cuda {

class Staging {
 public:
  struct Buffer {
    void* host = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;
    bool in_flight = false;
    uint64_t generation = 0;  // bumped each time the buffer takes new bytes
  };
  // What a capture took from staging: buffers it owns, or (test-only release mode)
  // pool buffers it merely read, with their generation at capture.
  struct CaptureRecord {
    std::vector<std::unique_ptr<Buffer>> owned;
    std::vector<size_t> used;             // bytes of each owned buffer that a copy reads
    std::vector<uint64_t> checksums;      // their hash at the end of capture
    std::vector<std::pair<const Buffer*, uint64_t>> borrowed;
  };

  Staging(PinnedAllocator& pinned, cudaStream_t stream) : pinned_(pinned), stream_(stream) {}
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Enqueues host -> device on the stream; `src` may be reused as soon as this returns.
  void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
  // Device -> host; returns when the bytes have arrived. Not allowed while capturing.
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
  size_t pooled_bytes() const;
  size_t in_flight() const;

  // Keeps at least `count` idle buffers of the smallest size class, so that a capture
  // need not allocate pinned memory.
  void reserve_idle(size_t count);
  void begin_capture(CaptureRecord* record, bool release_like_eager);
  void end_capture();
  // Returns a capture's buffers to pinned memory (the graph is gone).
  void free_record(CaptureRecord& record);
  static std::string check_record(const CaptureRecord& record);
  static void take_checksums(CaptureRecord& record);
  static std::string verify_checksums(const CaptureRecord& record);

 private:
  Buffer& acquire(size_t bytes);
  std::unique_ptr<Buffer> make_buffer(size_t bytes);

  PinnedAllocator& pinned_;
  cudaStream_t stream_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  CaptureRecord* capture_ = nullptr;
  bool release_like_eager_ = false;
};

}  // namespace onyx::cuda
