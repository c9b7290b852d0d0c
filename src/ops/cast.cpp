// Cast and CastLike.
#include "ops/common.h"

namespace onyx {

void register_cast_ops(OpRegistry& r) {}

}  // namespace onyx
