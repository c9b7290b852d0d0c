// Normalizations: LayerNormalization, RMSNormalization, ....
#include "ops/common.h"

namespace onyx {

void register_normalization_ops(OpRegistry& r) {}

}  // namespace onyx
