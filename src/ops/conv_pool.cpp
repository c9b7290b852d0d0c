// Convolutions and pooling.
#include "ops/common.h"

namespace onyx {

void register_conv_pool_ops(OpRegistry& r) {}

}  // namespace onyx
