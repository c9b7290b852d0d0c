// onyx.test::StagedAdd, the CPU reference of a diagnostic op whose CUDA kernel sends a
// shape-dependent parameter block through host staging memory (see
// src/backends/cuda/kernels/staged_test_op.cu): y = x + p[i % 64], p[k] = scale * rows + k.
#include "ops/common.h"

namespace onyx {

void register_test_ops(OpRegistry& r) {
  r.add(OpDef{"onyx.test", "StagedAdd", 1,
              [](InferContext& ctx) {
                ONYX_CHECK(ctx.input_dtype(0) == DType::kFloat32, "StagedAdd takes float32");
                infer_same_as_input(ctx);
              },
              [](KernelContext& ctx) {
                const Tensor& x = ctx.input(0);
                const int64_t rows = x.rank() ? x.numel() / std::max<int64_t>(x.shape()[x.rank() - 1], 1) : 1;
                const float scale = ctx.attr_float("scale", 1.f);
                const float* in = x.data<float>();
                float* out = ctx.output(0).data<float>();
                for (int64_t i = 0; i < x.numel(); ++i)
                  out[i] = in[i] + (scale * static_cast<float>(rows) + static_cast<float>(i % 64));
              },
              {}});
}

}  // namespace onyx
