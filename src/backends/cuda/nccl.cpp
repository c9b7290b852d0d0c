// Tensor-parallel groups of GPUs (onyx/communicator.h's make_nccl_communicator) and the CUDA
// kernels of onyx::AllReduce and onyx::AllGather (ops/collective_ops.cpp has the CPU ones).
//
// NCCL is opened at run time (the file the first group names, else libnccl.so.2 where the loader
// looks), as cuBLASLt is (cublaslt_loader.cpp): a build or a session that never makes a GPU group
// does not need it. One process holds every rank: the
// group's communicators come from ncclCommInitAll over its devices, and each rank's session
// (on its device, on a thread of its own) enqueues its collectives on its stream.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <mutex>

#include "backends/cuda/cuda_kernels.h"
#include "onyx/communicator.h"

namespace onyx {

namespace {

struct Nccl {
  decltype(&ncclCommInitAll) init_all = nullptr;
  decltype(&ncclCommDestroy) destroy = nullptr;
  decltype(&ncclCommAbort) abort = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  std::string missing;  // why NCCL cannot be used ("" when it can)
};

// NCCL, opened by the first call: from `library` when given (a path where the loader does not
// look), else libnccl.so.2 where it does.
const Nccl& nccl(const std::string& library = "") {
  static Nccl n;
  static std::once_flag once;
  std::call_once(once, [&] {
    void* h = nullptr;
    for (const char* name : {library.c_str(), "libnccl.so.2", "libnccl.so"})
      if (*name && (h = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h) {
      const char* e = dlerror();
      n.missing = cat(library.empty() ? std::string("libnccl.so.2") : library, " could not be loaded (",
                      e ? e : "not found", ")");
      return;
    }
    n.init_all = reinterpret_cast<decltype(n.init_all)>(dlsym(h, "ncclCommInitAll"));
    n.destroy = reinterpret_cast<decltype(n.destroy)>(dlsym(h, "ncclCommDestroy"));
    n.abort = reinterpret_cast<decltype(n.abort)>(dlsym(h, "ncclCommAbort"));
    n.all_reduce = reinterpret_cast<decltype(n.all_reduce)>(dlsym(h, "ncclAllReduce"));
    n.all_gather = reinterpret_cast<decltype(n.all_gather)>(dlsym(h, "ncclAllGather"));
    n.error_string = reinterpret_cast<decltype(n.error_string)>(dlsym(h, "ncclGetErrorString"));
    if (!n.init_all || !n.destroy || !n.abort || !n.all_reduce || !n.all_gather || !n.error_string)
      n.missing = "libnccl.so.2 lacks ncclCommInitAll, ncclCommAbort, ncclAllReduce, ncclAllGather or "
                  "ncclGetErrorString";
  });
  return n;
}

void check(ncclResult_t r, const char* what) {
  ONYX_CHECK(r == ncclSuccess, what, " failed: ", nccl().error_string(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat16: return ncclFloat16;
    case DType::kBFloat16: return ncclBfloat16;
    default: throw Error(cat("AllReduce on a GPU takes float32, float16 or bfloat16, got ", dtype_name(t)));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const std::vector<int>& devices, const std::string& library)
      : devices_(devices), comms_(devices.size(), nullptr) {
    const Nccl& n = nccl(library);
    ONYX_CHECK(n.missing.empty(), "a GPU tensor-parallel group needs NCCL: ", n.missing);
    for (size_t i = 0; i < devices.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        ONYX_CHECK(devices[i] != devices[j], "a GPU tensor-parallel group takes each GPU once: ranks ", j, " and ", i,
                   " both name cuda:", devices[i]);
    check(n.init_all(comms_.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
  }
  ~NcclCommunicator() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (ncclComm_t c : comms_)
      if (c) nccl().destroy(c);
  }
  int world() const override { return static_cast<int>(comms_.size()); }
  int device(int rank) const override { return rank >= 0 && rank < world() ? devices_[rank] : -1; }

  void all_reduce_sum(int, const float*, float*, size_t) override { host_refused(); }
  void all_gather(int, const void*, void*, size_t) override { host_refused(); }
  // A rank that failed before its collective leaves the others' NCCL kernels waiting on their
  // GPUs for it: ncclCommAbort ends them, and the group is broken from then on.
  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) return;
    broken_ = why.empty() ? std::string("aborted") : why;
    for (ncclComm_t& c : comms_)
      if (c) {
        nccl().abort(c);
        c = nullptr;
      }
  }

  void all_reduce_sum_device(int rank, const void* x, void* y, size_t count, DType dtype, void* stream) override {
    check(nccl().all_reduce(x, y, count, nccl_type(dtype), ncclSum, comm(rank), static_cast<cudaStream_t>(stream)),
          "ncclAllReduce");
  }
  void all_gather_device(int rank, const void* x, void* y, size_t bytes, void* stream) override {
    check(nccl().all_gather(x, y, bytes, ncclUint8, comm(rank), static_cast<cudaStream_t>(stream)), "ncclAllGather");
  }

 private:
  ncclComm_t comm(int rank) {
    ONYX_CHECK(rank >= 0 && rank < world(), "rank ", rank, " is outside the group of ", world());
    std::lock_guard<std::mutex> lock(mutex_);
    ONYX_CHECK(broken_.empty(), "the tensor-parallel group is broken (", broken_, ")");
    return comms_[rank];
  }
  [[noreturn]] static void host_refused() {
    throw Error("this tensor-parallel group's ranks are GPUs: its collectives run on a GPU session's stream, not "
                "on the CPU (a collective node that fell back to the CPU cannot use it)");
  }
  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::mutex mutex_;
  std::string broken_;  // why the group was aborted ("" while whole)
};

std::shared_ptr<Communicator> group_of(const KernelContext& ctx) {
  std::shared_ptr<Communicator> c = find_communicator(ctx.attr_int("communicator"));
  ONYX_CHECK(c, "the tensor-parallel group of this node is gone (its sessions' communicator was released)");
  return c;
}

void run_all_reduce(KernelContext& ctx, cuda::CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  group_of(ctx)->all_reduce_sum_device(static_cast<int>(ctx.attr_int("rank")), x.raw(), ctx.output(0).raw(),
                                       static_cast<size_t>(x.numel()), x.dtype(), cu.stream);
}

// Every rank's x along `axis`: each rank's block of `inner` values per outer index. One gather
// into y when there is one outer index; otherwise a chunk of outer indexes at a time gathered
// into the workspace ([rank][chunk][inner]) and copied into place.
void run_all_gather(KernelContext& ctx, cuda::CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  std::shared_ptr<Communicator> c = group_of(ctx);
  const int rank = static_cast<int>(ctx.attr_int("rank"));
  const int64_t world = ctx.attr_int("world");
  ONYX_CHECK(world == c->world(), "AllGather: the node says ", world, " ranks, its group has ", c->world());
  const int64_t r = x.rank();
  ONYX_CHECK(r >= 1, "AllGather needs x of rank >= 1, got ", x.type_str());
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -1), r);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.shape()[i];
  for (int64_t i = axis; i < r; ++i) inner *= x.shape()[i];
  const size_t block = static_cast<size_t>(inner) * dtype_size(x.dtype());
  char* y = static_cast<char*>(ctx.output(0).raw());
  if (outer == 1) {
    c->all_gather_device(rank, x.raw(), y, block, cu.stream);
    return;
  }
  const int64_t chunk = static_cast<int64_t>(cu.workspace_bytes / (block * world));
  ONYX_CHECK(chunk >= 1, "AllGather: one row of every rank (", block * world, " bytes) exceeds the ",
             cu.workspace_bytes, "-byte workspace");
  char* room = static_cast<char*>(cu.workspace);
  for (int64_t o0 = 0; o0 < outer; o0 += chunk) {
    const int64_t rows = std::min(chunk, outer - o0);
    c->all_gather_device(rank, static_cast<const char*>(x.raw()) + o0 * block, room, rows * block, cu.stream);
    for (int64_t q = 0; q < world; ++q)
      ONYX_CUDA_CHECK(cudaMemcpy2DAsync(y + (o0 * world + q) * block, world * block, room + q * rows * block, block,
                                        block, rows, cudaMemcpyDeviceToDevice, cu.stream));
  }
}

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(const std::vector<int>& devices, const std::string& library) {
  ONYX_CHECK(!devices.empty(), "a GPU tensor-parallel group needs at least one device");
  return std::make_shared<NcclCommunicator>(devices, library);
}

namespace cuda {

void register_collective_kernels(CudaKernelRegistry& r) {
  auto support = [](const Node&, const std::vector<ValueType>& in) {
    return in.empty() || in[0].dtype == DType::kFloat32 || in[0].dtype == DType::kFloat16 ||
                   in[0].dtype == DType::kBFloat16
               ? std::string()
               : std::string("the collectives on CUDA take float32, float16 or bfloat16");
  };
  r.add(domain_kernel("onyx", "AllReduce", 1, run_all_reduce, support));
  r.add(domain_kernel("onyx", "AllGather", 1, run_all_gather, support));
}

}  // namespace cuda

}  // namespace onyx
