#include "backends/cuda/staging.h"

#include <cstring>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

namespace {
constexpr size_t kSmallestClass = 64 << 10;  // size classes: powers of two from 64 KiB
}

Staging::~Staging() {
  for (auto& b : buffers_) {
    if (b->in_flight) cudaEventSynchronize(b->done);
    cudaEventDestroy(b->done);
    pinned_.deallocate(b->host, b->bytes);
  }
}

std::unique_ptr<Staging::Buffer> Staging::make_buffer(size_t bytes) {
  size_t size = kSmallestClass;
  while (size < bytes) size <<= 1;
  auto b = std::make_unique<Buffer>();
  b->host = pinned_.allocate(size);
  b->bytes = size;
  ONYX_CUDA_CHECK(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming));
  return b;
}

Staging::Buffer& Staging::acquire(size_t bytes) {
  Buffer* best = nullptr;
  for (auto& b : buffers_) {
    // Querying an event while the stream captures would invalidate the capture: then
    // only buffers already known idle are taken (reserve_idle made some before it began).
    if (!capture_ && b->in_flight && cudaEventQuery(b->done) == cudaSuccess) b->in_flight = false;
    if (!b->in_flight && !b->pending && b->bytes >= bytes && (!best || b->bytes < best->bytes)) best = b.get();
  }
  if (!best) {
    buffers_.push_back(make_buffer(bytes));
    best = buffers_.back().get();
  }
  ++best->generation;
  return *best;
}

void Staging::reserve_idle(size_t count) {
  size_t idle = 0;
  for (auto& b : buffers_) {
    if (b->in_flight && cudaEventQuery(b->done) == cudaSuccess) b->in_flight = false;
    idle += !b->in_flight && !b->pending && b->bytes == kSmallestClass;
  }
  for (; idle < count; ++idle) buffers_.push_back(make_buffer(kSmallestClass));
}

Staging::Buffer& Staging::stage(void* device_dst, const void* host_src, size_t bytes) {
  Buffer& b = acquire(bytes);
  std::memcpy(b.host, host_src, bytes);
  ONYX_CUDA_CHECK(cudaMemcpyAsync(device_dst, b.host, bytes, cudaMemcpyHostToDevice, stream_));
  if (!capture_) {
    ONYX_CUDA_CHECK(cudaEventRecord(b.done, stream_));
    b.in_flight = true;
  }
  return b;
}

void Staging::copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  Buffer& b = stage(device_dst, host_src, bytes);
  if (!capture_) return;
  // The recorded copy reads this buffer at every replay: it leaves the pool with the graph.
  for (auto it = buffers_.begin(); it != buffers_.end(); ++it)
    if (it->get() == &b) {
      capture_->owned.push_back(std::move(*it));
      capture_->used.push_back(bytes);
      buffers_.erase(it);
      break;
    }
}

void Staging::copy_to_device_pooled(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  Buffer& b = stage(device_dst, host_src, bytes);
  if (capture_) capture_->borrowed.emplace_back(&b, b.generation);
}

void Staging::copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  ONYX_CHECK(!capture_, "copying device memory to the host synchronizes, which a CUDA graph capture cannot record");
  Buffer& b = acquire(bytes);
  ONYX_CUDA_CHECK(cudaMemcpyAsync(b.host, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  ONYX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::memcpy(host_dst, b.host, bytes);
}

void Staging::download(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  ONYX_CHECK(!capture_, "copying device memory to the host synchronizes, which a CUDA graph capture cannot record");
  Buffer& b = acquire(bytes);
  ONYX_CUDA_CHECK(cudaMemcpyAsync(b.host, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  b.pending = true;
  downloads_.push_back({&b, host_dst, bytes});
}

void Staging::complete_downloads() {
  for (const Download& d : downloads_) {
    std::memcpy(d.host_dst, d.buffer->host, d.bytes);
    d.buffer->pending = false;
  }
  downloads_.clear();
}

void Staging::begin_capture(CaptureRecord* record) { capture_ = record; }

void Staging::end_capture() { capture_ = nullptr; }

void Staging::free_record(CaptureRecord& record) {
  for (auto& b : record.owned) {
    cudaEventDestroy(b->done);
    pinned_.deallocate(b->host, b->bytes);
  }
  record.owned.clear();
  record.used.clear();
  record.checksums.clear();
  record.borrowed.clear();
}

static uint64_t fnv1a(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void Staging::take_checksums(CaptureRecord& record) {
  record.checksums.clear();
  for (size_t i = 0; i < record.owned.size(); ++i)
    record.checksums.push_back(fnv1a(record.owned[i]->host, record.used[i]));
}

std::string Staging::verify_checksums(const CaptureRecord& record) {
  for (size_t i = 0; i < record.owned.size() && i < record.checksums.size(); ++i)
    if (fnv1a(record.owned[i]->host, record.used[i]) != record.checksums[i])
      return cat("the bytes of a retained host staging buffer (", record.used[i], " bytes at ", record.owned[i]->host,
                 ") changed since capture");
  return "";
}

std::string Staging::check_record(const CaptureRecord& record) {
  for (const auto& [b, generation] : record.borrowed)
    if (b->generation != generation)
      return cat("a host staging buffer that the graph's copy reads (", b->bytes, " bytes at ", b->host,
                 ") was reused since capture (generation ", generation, " -> ", b->generation, ")");
  return "";
}

size_t Staging::pooled_bytes() const {
  size_t total = 0;
  for (const auto& b : buffers_) total += b->bytes;
  return total;
}

size_t Staging::in_flight() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b->in_flight && cudaEventQuery(b->done) != cudaSuccess;
  return n;
}

}  // namespace onyx::cuda
