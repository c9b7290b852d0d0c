#include "backends/cuda/staging.h"

#include <cstring>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

Staging::~Staging() {
  for (auto& b : buffers_) {
    if (b.in_flight) cudaEventSynchronize(b.done);
    cudaEventDestroy(b.done);
    pinned_.deallocate(b.host, b.bytes);
  }
}

Staging::Buffer& Staging::acquire(size_t bytes) {
  Buffer* best = nullptr;
  for (auto& b : buffers_) {
    if (b.in_flight && cudaEventQuery(b.done) == cudaSuccess) b.in_flight = false;
    if (!b.in_flight && b.bytes >= bytes && (!best || b.bytes < best->bytes)) best = &b;
  }
  if (best) return *best;
  size_t size = 64 << 10;  // size classes of powers of two from 64 KiB keep the pool small
  while (size < bytes) size <<= 1;
  Buffer b;
  b.host = pinned_.allocate(size);
  b.bytes = size;
  ONYX_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
  buffers_.push_back(b);
  return buffers_.back();
}

void Staging::copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  Buffer& b = acquire(bytes);
  std::memcpy(b.host, host_src, bytes);
  ONYX_CUDA_CHECK(cudaMemcpyAsync(device_dst, b.host, bytes, cudaMemcpyHostToDevice, stream_));
  ONYX_CUDA_CHECK(cudaEventRecord(b.done, stream_));
  b.in_flight = true;
}

void Staging::copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  Buffer& b = acquire(bytes);
  ONYX_CUDA_CHECK(cudaMemcpyAsync(b.host, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  ONYX_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::memcpy(host_dst, b.host, bytes);
}

size_t Staging::pooled_bytes() const {
  size_t total = 0;
  for (const auto& b : buffers_) total += b.bytes;
  return total;
}

size_t Staging::in_flight() const {
  size_t n = 0;
  for (const auto& b : buffers_) n += b.in_flight && cudaEventQuery(b.done) != cudaSuccess;
  return n;
}

}  // namespace onyx::cuda
