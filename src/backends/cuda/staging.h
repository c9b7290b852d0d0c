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
    bool pending = false;     // holds a download not yet copied out (complete_downloads)
    uint64_t generation = 0;  // bumped each time the buffer takes new bytes
  };
  // What a capture took from staging: buffers it owns, and pool buffers it merely read
  // (copy_to_device_pooled), with their generation at capture.
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
  // The same copy, but the buffer stays in the pool: also under capture, where the
  // captured copy then merely borrows it, and the replay contract (check_record)
  // refuses the graph once the buffer has taken other bytes. This is what the plugin of
  // seed 000 did; kernels use copy_to_device, and only the test of the contract uses this.
  void copy_to_device_pooled(void* device_dst, const void* host_src, size_t bytes);
  // Device -> host; returns when the bytes have arrived. Not allowed while capturing.
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
  // Device -> host, enqueued; the bytes reach `host_dst` in complete_downloads(), which
  // the caller runs once the stream has synchronized. Not allowed while capturing.
  void download(void* host_dst, const void* device_src, size_t bytes);
  void complete_downloads();
  size_t pooled_bytes() const;
  size_t in_flight() const;

  // Keeps at least `count` idle buffers of the smallest size class, so that a capture
  // need not allocate pinned memory.
  void reserve_idle(size_t count);
  void begin_capture(CaptureRecord* record);
  void end_capture();
  // Returns a capture's buffers to pinned memory (the graph is gone).
  void free_record(CaptureRecord& record);
  static std::string check_record(const CaptureRecord& record);
  static void take_checksums(CaptureRecord& record);
  static std::string verify_checksums(const CaptureRecord& record);

 private:
  Buffer& acquire(size_t bytes);
  Buffer& stage(void* device_dst, const void* host_src, size_t bytes);
  std::unique_ptr<Buffer> make_buffer(size_t bytes);
  struct Download {
    Buffer* buffer;
    void* host_dst;
    size_t bytes;
  };

  PinnedAllocator& pinned_;
  cudaStream_t stream_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  CaptureRecord* capture_ = nullptr;
  std::vector<Download> downloads_;
};

}  // namespace onyx::cuda
