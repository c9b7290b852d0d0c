// The CUDA backend: one device, one non-blocking stream, governed memory pools,
// the staging path, and the kernel table.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstring>

#include "backends/backend.h"
#include "backends/cuda_entry.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_allocator.h"
#include "backends/cuda/staging.h"

namespace onyx {

int cuda_device_count(std::string* why) {
  int n = 0;
  cudaError_t st = cudaGetDeviceCount(&n);
  if (st != cudaSuccess) {
    if (why) *why = cat("no usable CUDA device (", cudaGetErrorString(st), ")");
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device found";
  return n;
}

namespace cuda {

std::string cublaslt_unavailable_reason();

namespace {

constexpr size_t kWorkspaceBytes = 32ull << 20;
constexpr size_t kParamScratchBytes = 64 << 10;

class CudaGraphWork final : public CapturedWork {
 public:
  CudaGraphWork(cudaGraphExec_t exec, cudaStream_t stream, std::unique_ptr<Staging::CaptureRecord> record,
                Staging* staging)
      : exec_(exec), stream_(stream), record_(std::move(record)), staging_(staging) {}
  ~CudaGraphWork() override {
    cudaStreamSynchronize(stream_);  // a replay in flight may still read the retained buffers
    cudaGraphExecDestroy(exec_);
    staging_->free_record(*record_);
  }
  void replay() override { ONYX_CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }
  std::string check_staging() const override { return Staging::check_record(*record_); }
  size_t retained_staging_bytes() const override {
    size_t n = 0;
    for (const auto& b : record_->owned) n += b->bytes;
    return n;
  }
  size_t retained_staging_buffers() const override { return record_->owned.size(); }
  std::string verify_staging_checksums() const override { return Staging::verify_checksums(*record_); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  std::unique_ptr<Staging::CaptureRecord> record_;
  Staging* staging_;
};

// A readback's pinned bytes: `capacity` for the copy, then the error word. One event marks the
// stream after both copies; wait() synchronizes on it alone.
class CudaReadback final : public DeviceReadback {
 public:
  CudaReadback(std::shared_ptr<PinnedAllocator> pinned, size_t capacity, cudaStream_t stream,
               const unsigned int* error_word)
      : pinned_(std::move(pinned)), capacity_((capacity + 15) / 16 * 16), stream_(stream), error_word_(error_word) {
    bytes_ = capacity_ + sizeof(unsigned int);
    buf_ = static_cast<char*>(pinned_->allocate(bytes_));
    if (cudaEventCreateWithFlags(&done_, cudaEventDisableTiming) != cudaSuccess) {
      pinned_->deallocate(buf_, bytes_);
      ONYX_CUDA_CHECK(cudaGetLastError());
    }
  }
  ~CudaReadback() override {
    if (pending_) cudaEventSynchronize(done_);  // the copy lands before its memory goes back
    cudaEventDestroy(done_);
    pinned_->deallocate(buf_, bytes_);
  }
  void start(const void* device_src, size_t bytes) override {
    ONYX_CHECK(!pending_, "a readback was started again before it was waited for");
    ONYX_CHECK(bytes <= capacity_, "a readback of ", bytes, " bytes exceeds its capacity of ", capacity_);
    if (bytes) ONYX_CUDA_CHECK(cudaMemcpyAsync(buf_, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
    ONYX_CUDA_CHECK(
        cudaMemcpyAsync(buf_ + capacity_, error_word_, sizeof(unsigned int), cudaMemcpyDeviceToHost, stream_));
    ONYX_CUDA_CHECK(cudaEventRecord(done_, stream_));
    pending_ = true;
  }
  const void* wait(unsigned* error_word) override {
    ONYX_CHECK(pending_, "a readback was waited for before it was started");
    pending_ = false;
    ONYX_CUDA_CHECK(cudaEventSynchronize(done_));
    if (error_word) std::memcpy(error_word, buf_ + capacity_, sizeof(unsigned int));
    return buf_;
  }
  bool pending() const override { return pending_; }

 private:
  std::shared_ptr<PinnedAllocator> pinned_;
  size_t capacity_, bytes_ = 0;
  cudaStream_t stream_;
  const unsigned int* error_word_;
  char* buf_ = nullptr;
  cudaEvent_t done_ = nullptr;
  bool pending_ = false;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, const SessionOptions& options) : index_(index), overlap_launches_(options.overlap_launches) {
    ONYX_CUDA_CHECK(cudaSetDevice(index));
    size_t free = 0, total = 0;
    ONYX_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    size_t budget = options.memory_budget_bytes
                        ? options.memory_budget_bytes
                        : static_cast<size_t>(static_cast<double>(free) * options.memory_fraction);
    device_gov_ = MemoryGovernor::create(cat("cuda:", index), budget);
    host_gov_ = MemoryGovernor::create("host (pinned)", options.pinned_memory_budget_bytes);
    ONYX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    std::string no_lt = cublaslt_unavailable_reason();
    ONYX_CHECK(no_lt.empty(), "cuBLASLt could not be loaded: ", no_lt);
    cublasLtHandle_t lt = nullptr;
    if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) throw Error("cuBLASLt could not be initialized");
    lt_ = lt;
    weights_ = std::make_shared<DeviceAllocator>(index, "weights", device_gov_);
    values_ = std::make_shared<DeviceAllocator>(index, "plan arenas and values", device_gov_);
    // The cuBLASLt workspace and the kernels' parameter scratch: one block, one holder.
    workspace_alloc_ = std::make_shared<DeviceAllocator>(index, "library workspace", device_gov_,
                                                         kWorkspaceBytes + kParamScratchBytes + 256);
    workspace_ = workspace_alloc_->allocate(kWorkspaceBytes);
    param_scratch_ = workspace_alloc_->allocate(kParamScratchBytes);
    error_word_ = static_cast<unsigned int*>(workspace_alloc_->allocate(sizeof(unsigned int)));
    ONYX_CUDA_CHECK(cudaMemsetAsync(error_word_, 0, sizeof(unsigned int), stream_));
    pinned_ = std::make_shared<PinnedAllocator>("staging", host_gov_);
    staging_ = std::make_unique<Staging>(*pinned_, stream_);
  }

  ~CudaBackend() override {
    cudaSetDevice(index_);
    if (stream_) cudaStreamSynchronize(stream_);
    staging_.reset();
    if (workspace_) workspace_alloc_->deallocate(workspace_, kWorkspaceBytes);
    if (param_scratch_) workspace_alloc_->deallocate(param_scratch_, kParamScratchBytes);
    if (error_word_) workspace_alloc_->deallocate(error_word_, sizeof(unsigned int));
    if (lt_) cublasLtDestroy(reinterpret_cast<cublasLtHandle_t>(lt_));
    if (stream_) cudaStreamDestroy(stream_);
  }

  Device device() const override { return Device::cuda(index_); }
  Allocator& allocator() override { return *values_; }
  Allocator& weights_allocator() override { return *weights_; }
  std::shared_ptr<Allocator> make_pool(const std::string& holder) override {
    return std::make_shared<DeviceAllocator>(index_, holder, device_gov_);
  }
  MemoryGovernor& governor() override { return *device_gov_; }
  size_t alignment() const override { return DeviceAllocator::kAlignment; }

  bool has_kernel(const Node& node) const override { return CudaKernelRegistry::global().find(node) != nullptr; }

  KernelFn find_kernel(const Node& node, const std::vector<ValueType>& inputs, std::string* why_not) override {
    const CudaKernelDef* k = CudaKernelRegistry::global().find(node);
    std::string why = k ? (k->supports ? k->supports(node, inputs) : "")
                        : cat("no CUDA kernel for ", node.domain.empty() ? "" : node.domain + "::", node.op_type);
    if (!why.empty()) {
      if (why_not) *why_not = why;
      return {};
    }
    return [this, k](KernelContext& ctx) { launch(*k, ctx); };
  }

  void copy_from_host(void* device_dst, const void* host_src, size_t bytes) override {
    staging_->copy_to_device(device_dst, host_src, bytes);
  }
  void copy_to_host(void* host_dst, const void* device_src, size_t bytes) override {
    staging_->copy_to_host(host_dst, device_src, bytes);
  }
  void download(void* host_dst, const void* device_src, size_t bytes) override {
    staging_->download(host_dst, device_src, bytes);
  }
  void copy_on_device(void* device_dst, const void* device_src, size_t bytes) override {
    if (bytes == 0 || device_dst == device_src) return;
    ONYX_CUDA_CHECK(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void copy_many_on_device(const std::vector<DeviceCopy>& copies) override {
    std::vector<DeviceCopy> live;
    live.reserve(copies.size());
    for (const DeviceCopy& c : copies)
      if (c.bytes && c.dst != c.src) live.push_back(c);
    if (live.size() == 1) copy_on_device(live[0].dst, live[0].src, live[0].bytes);
    else if (!live.empty()) copy_batch_on_device(live.data(), live.size(), stream_);
  }

  std::string finish() override {
    // The error word travels with the run's downloads: one synchronization for all.
    staging_->download(&error_seen_, error_word_, sizeof error_seen_);
    cudaError_t st = cudaStreamSynchronize(stream_);
    staging_->complete_downloads();
    check_cuda(st, "cudaStreamSynchronize");
    const unsigned int word = error_seen_;
    if (!word) return "";
    ONYX_CUDA_CHECK(cudaMemsetAsync(error_word_, 0, sizeof(unsigned int), stream_));
    std::string what;
    if (word & kDeviceErrorGatherIndex) what += "Gather: an index was out of range";
    if (word & kDeviceErrorRotaryPosition)
      what += cat(what.empty() ? "" : "; ",
                  "RotaryEmbedding or GroupQueryAttention: a position was outside the cos/sin cache");
    if (word & kDeviceErrorCachePosition)
      what += cat(what.empty() ? "" : "; ", "CacheUpdate: the write position was outside the cache");
    if (word & kDeviceErrorAttentionLengths)
      what += cat(what.empty() ? "" : "; ",
                  "GroupQueryAttention: seqlens_k or total_sequence_length do not fit the past/present buffers");
    if (word & kDeviceErrorIndexInput)
      what += cat(what.empty() ? "" : "; ", "ScatterND or CumSum: an index or axis input was out of range");
    return what;
  }

  std::unique_ptr<DeviceReadback> make_readback(size_t capacity) override {
    ONYX_CUDA_CHECK(cudaSetDevice(index_));
    return std::make_unique<CudaReadback>(pinned_, capacity, stream_, error_word_);
  }

  void* stream_handle() override { return stream_; }

  void make_current() override {
    int now = -1;
    if (cudaGetDevice(&now) != cudaSuccess || now != index_) ONYX_CUDA_CHECK(cudaSetDevice(index_));
  }

  std::unique_ptr<CapturedWork> capture(const std::function<void()>& record) override {
    ONYX_CUDA_CHECK(cudaSetDevice(index_));
    staging_->reserve_idle(4);
    auto rec = std::make_unique<Staging::CaptureRecord>();
    auto guard = [&](bool on) {
      values_->set_capturing(on);
      weights_->set_capturing(on);
      if (on) staging_->begin_capture(rec.get());
      else staging_->end_capture();
    };
    guard(true);
    ONYX_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
      record();
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      guard(false);
      staging_->free_record(*rec);
      throw;
    }
    cudaError_t st = cudaStreamEndCapture(stream_, &graph);
    guard(false);
    std::string violation = take_capture_violation();
    if (st != cudaSuccess || !violation.empty()) {
      if (graph) cudaGraphDestroy(graph);
      cudaGetLastError();
      staging_->free_record(*rec);
      ONYX_CHECK(violation.empty(), violation);
      check_cuda(st, "cudaStreamEndCapture");
    }
    Staging::take_checksums(*rec);
    cudaGraphExec_t exec = nullptr;
    st = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    if (st != cudaSuccess) staging_->free_record(*rec);
    check_cuda(st, "cudaGraphInstantiate");
    return std::make_unique<CudaGraphWork>(exec, stream_, std::move(rec), staging_.get());
  }

  std::string take_capture_violation() override {
    std::string v = values_->take_violation();
    if (v.empty()) v = weights_->take_violation();
    return v;
  }

  void poison(void* ptr, size_t bytes) override { ONYX_CUDA_CHECK(cudaMemsetAsync(ptr, 0xFF, bytes, stream_)); }
  void zero(void* ptr, size_t bytes) override { ONYX_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream_)); }

  std::string memory_report() const override {
    return cat("cuda:", index_, " governor:\n", device_gov_->report(), "\nhost governor:\n", host_gov_->report(), "\n");
  }

 private:
  void launch(const CudaKernelDef& k, KernelContext& ctx) {
    CudaContext cu;
    cu.stream = stream_;
    cu.lt = reinterpret_cast<cublasLtContext*>(lt_);
    cu.workspace = workspace_;
    cu.workspace_bytes = kWorkspaceBytes;
    cu.device = index_;
    cu.staging = staging_.get();
    cu.param_scratch = param_scratch_;
    cu.param_scratch_bytes = kParamScratchBytes;
    cu.error_word = error_word_;
    cu.overlap_launches = overlap_launches_;
    with_lazy_context([&] { return cat("on cuda:", index_); }, [&] { k.run(ctx, cu); });
  }

  int index_;
  bool overlap_launches_;
  cudaStream_t stream_ = nullptr;
  void* lt_ = nullptr;
  std::shared_ptr<MemoryGovernor> device_gov_, host_gov_;
  std::shared_ptr<DeviceAllocator> weights_, values_, workspace_alloc_;
  void* workspace_ = nullptr;
  void* param_scratch_ = nullptr;
  unsigned int* error_word_ = nullptr;
  std::shared_ptr<PinnedAllocator> pinned_;
  std::unique_ptr<Staging> staging_;
  unsigned int error_seen_ = 0;  // the error word as the last finish() read it
};

}  // namespace
}  // namespace cuda

std::unique_ptr<Backend> make_cuda_backend(int index, const SessionOptions& options) {
  return with_context(cat("starting cuda:", index), [&]() -> std::unique_ptr<Backend> {
    return std::make_unique<cuda::CudaBackend>(index, options);
  });
}

}  // namespace onyx
