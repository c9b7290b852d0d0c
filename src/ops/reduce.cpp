// Reductions over axes: ReduceSum, ReduceMean, ReduceMax, ...
#include "ops/common.h"

namespace onyx {

void register_reduce_ops(OpRegistry& r) {}

}  // namespace onyx
