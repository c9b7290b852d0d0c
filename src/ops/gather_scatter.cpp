// Gather/Scatter families, indexing ops.
#include "ops/common.h"

namespace onyx {

void register_gather_scatter_ops(OpRegistry& r) {}

}  // namespace onyx
