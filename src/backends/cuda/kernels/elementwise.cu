// Elementwise kernels: unary, binary with broadcasting, Where, Cast, Expand, Range.
#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

void register_elementwise_kernels(CudaKernelRegistry& r) {}

}  // namespace onyx::cuda
