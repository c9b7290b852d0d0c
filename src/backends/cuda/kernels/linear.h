// What the linear kernels (linear.cu) expose besides their registration: a knob for the
// microbenchmark (bench/cuda_bench.cpp) that puts the few-row paths side by side.
#pragma once

namespace onyx::cuda {

// Which path 16-bit products of up to 8 rows take. kDefault: the streaming kernel (a warp per
// weight row at one or two rows, tensor cores at three to eight); kTensorCores: the streaming
// kernel's tensor-core form at every row count; kLibrary: cuBLASLt (with the norm and the gating
// as kernels of their own). Process-wide; for measurements, not for serving.
enum class FewRowPath { kDefault, kTensorCores, kLibrary };
void set_few_row_path(FewRowPath path);

}  // namespace onyx::cuda
