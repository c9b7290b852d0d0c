// Resize, Upsample, GridSample.
#include "ops/common.h"

namespace onyx {

void register_resize_ops(OpRegistry& r) {}

}  // namespace onyx
