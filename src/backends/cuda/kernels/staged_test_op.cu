// onyx.test::StagedAdd: y = x + p[i % 64], where the 64-float parameter block p is
// computed on the host from x's shape (p[k] = scale * rows + k) and sent to the
// device through the staging path. No production kernel stages through host memory;
// this op exists so that the capture tests can reproduce seed 000 (a captured copy
// reading a recycled pinned buffer) end to end.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/staging.h"

namespace onyx::cuda {

namespace {

__global__ void staged_add_kernel(const float* __restrict__ x, const float* __restrict__ p, float* __restrict__ y,
                                  int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] + p[i % 64];
}

void staged_add_run(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  ONYX_CHECK(cu.staging && cu.param_scratch && cu.param_scratch_bytes >= 64 * sizeof(float),
             "StagedAdd needs the staging path and the parameter scratch");
  const int64_t rows = x.rank() ? x.numel() / std::max<int64_t>(x.shape()[x.rank() - 1], 1) : 1;
  const float scale = ctx.attr_float("scale", 1.f);
  float block[64];
  for (int k = 0; k < 64; ++k) block[k] = scale * static_cast<float>(rows) + static_cast<float>(k);
  cu.staging->copy_to_device(cu.param_scratch, block, sizeof block);
  const int64_t n = x.numel();
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 8));
  staged_add_kernel<<<blocks, 256, 0, cu.stream>>>(x.data<float>(), static_cast<const float*>(cu.param_scratch),
                                                   y.data<float>(), n);
  ONYX_CUDA_CHECK_LAUNCH("StagedAdd");
}

}  // namespace

void register_test_kernels(CudaKernelRegistry& r) {
  r.add(CudaKernelDef{"onyx.test", "StagedAdd", staged_add_run,
                      [](const Node&, const std::vector<ValueType>& in) -> std::string {
                        return in.empty() || in[0].dtype != DType::kFloat32 ? "StagedAdd takes float32" : "";
                      }});
}

}  // namespace onyx::cuda
