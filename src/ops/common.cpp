#include "ops/common.h"

namespace onyx {

void infer_broadcast(InferContext& ctx, DType dt) {
  PartialShape shape = ctx.input_shape(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) shape = broadcast_shapes(shape, ctx.input_shape(i));
  ctx.set_output(0, dt == DType::kUndefined ? ctx.input_dtype(0) : dt, shape);
}

void check_same_dtypes(const InferContext& ctx) {
  DType d0 = ctx.input_dtype(0);
  for (size_t i = 1; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i))
      ONYX_CHECK(ctx.input_dtype(i) == d0, "input ", i, " has dtype ", dtype_name(ctx.input_dtype(i)),
                 ", but input 0 has ", dtype_name(d0));
}

std::vector<int64_t> input_ints(const InferContext& ctx, size_t i) {
  const Tensor* t = ctx.input_value(i);
  ONYX_CHECK(t, "input ", i, " must be known before running (its values decide the output shape)");
  ONYX_CHECK(t->dtype() == DType::kInt64 || t->dtype() == DType::kInt32, "input ", i, " must be int64 or int32, got ",
             dtype_name(t->dtype()));
  return t->to_int64_vector();
}

}  // namespace onyx
