// Reductions and normalizations: Reduce*, Softmax, LayerNormalization, RMS norms, Skip*Norm.
#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

void register_reduce_norm_kernels(CudaKernelRegistry& r) {}

}  // namespace onyx::cuda
