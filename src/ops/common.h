// Small helpers shared by the op family files.
#pragma once

#include "onyx/checked.h"
#include "ops/dispatch.h"
#include "ops/op.h"
#include "ops/registry.h"

namespace onyx {

// Output 0 has input `i`'s dtype and shape.
inline void infer_same_as_input(InferContext& ctx, size_t i = 0) {
  ctx.set_output(0, ctx.input_dtype(i), ctx.input_shape(i));
}

// Output 0 has the numpy broadcast of all present inputs' shapes, with dtype `dt`
// (input 0's dtype when kUndefined).
void infer_broadcast(InferContext& ctx, DType dt = DType::kUndefined);

// Every present input has the same dtype as input 0; throws naming the input otherwise.
void check_same_dtypes(const InferContext& ctx);

// Reads an int64 (or int32) 1-D tensor input's values; required to be known.
std::vector<int64_t> input_ints(const InferContext& ctx, size_t i);

}  // namespace onyx
