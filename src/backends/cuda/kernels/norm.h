// The RMS normalization of norm.cu for other kernel files (the norm before a product,
// linear.cu): rows of `cols` values, all of dtype `dt`, laid out one after another.
#pragma once

#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

// y = h / sqrt(mean(h^2) + eps) * gamma with h = x + skip (skip of x's layout, or null); when
// sum is given, h rounded to dt is written there.
void rms_norm_rows(DType dt, const void* x, const void* skip, const void* gamma, void* y, void* sum, int64_t rows,
                   int64_t cols, float eps, CudaContext& cu);

}  // namespace onyx::cuda
