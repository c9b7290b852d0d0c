// Data movement: Gather, Concat, Split, Slice, Transpose, RotaryEmbedding.
#include "backends/cuda/cuda_kernels.h"

namespace onyx::cuda {

void register_data_kernels(CudaKernelRegistry& r) {}

}  // namespace onyx::cuda
