// onyx.test::StagedAdd, a diagnostic op registered by the GPU tests only: y = x + p[i % 64],
// where the 64-float parameter block p is computed on the host from x's shape
// (p[k] = scale * rows + k) and sent to the device through the staging path. No
// production kernel stages through host memory; this op lets the capture tests
// reproduce seed 000 (a captured copy reading a recycled pinned buffer) end to end.
// With pooled=1 its buffer stays in the staging pool, as the plugin of seed 000 did.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/staging.h"
#include "ops/registry.h"

namespace onyx::cuda {

namespace {

float param(float scale, int64_t rows, int k) { return scale * static_cast<float>(rows) + static_cast<float>(k); }

int64_t rows_of(const Tensor& x) { return x.rank() ? x.numel() / std::max<int64_t>(x.shape()[x.rank() - 1], 1) : 1; }

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
  const float scale = ctx.attr_float("scale", 1.f);
  float block[64];
  for (int k = 0; k < 64; ++k) block[k] = param(scale, rows_of(x), k);
  if (ctx.attr_int("pooled", 0)) cu.staging->copy_to_device_pooled(cu.param_scratch, block, sizeof block);
  else cu.staging->copy_to_device(cu.param_scratch, block, sizeof block);
  const int64_t n = x.numel();
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 8));
  staged_add_kernel<<<blocks, 256, 0, cu.stream>>>(x.data<float>(), static_cast<const float*>(cu.param_scratch),
                                                   y.data<float>(), n);
  ONYX_CUDA_CHECK_LAUNCH("StagedAdd");
}

// The CPU reference.
void staged_add_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const float scale = ctx.attr_float("scale", 1.f);
  const float* in = x.data<float>();
  float* out = ctx.output(0).data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] + param(scale, rows_of(x), static_cast<int>(i % 64));
}

const bool registered = [] {
  OpRegistry::add_custom(domain_op(
      "onyx.test", "StagedAdd", 1,
      [](InferContext& ctx) {
        ONYX_CHECK(ctx.input_dtype(0) == DType::kFloat32, "StagedAdd takes float32");
        ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
      },
      staged_add_cpu));
  CudaKernelRegistry::add_custom(domain_kernel("onyx.test", "StagedAdd", 1, staged_add_run,
                                               [](const Node&, const std::vector<ValueType>& in) -> std::string {
                                                 return in.empty() || in[0].dtype != DType::kFloat32
                                                            ? "StagedAdd takes float32"
                                                            : "";
                                               }));
  return true;
}();

}  // namespace

}  // namespace onyx::cuda
