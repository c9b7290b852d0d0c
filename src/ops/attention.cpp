// Attention and rotary embeddings.
#include "ops/common.h"

namespace onyx {

void register_attention_ops(OpRegistry& r) {}

}  // namespace onyx
