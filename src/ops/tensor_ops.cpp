// Ops that move, view or make tensors: Reshape, Identity, Constant, ...
#include <cstring>

#include "ops/common.h"

namespace onyx {

namespace {

void infer_reshape(InferContext& ctx) {
  Shape in = ctx.input_concrete_shape(0);
  std::vector<int64_t> target = input_ints(ctx, 1);
  bool allowzero = ctx.attr_int("allowzero", 0) != 0;
  int64_t known = 1;
  int infer_axis = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowzero) {
      ONYX_CHECK(i < in.rank(), "shape entry ", i, " is 0 (copy), but the input has rank ", in.rank());
      target[i] = in[i];
    }
    if (target[i] == -1) {
      ONYX_CHECK(infer_axis < 0, "more than one -1 in the target shape");
      infer_axis = static_cast<int>(i);
    } else {
      ONYX_CHECK(target[i] >= 0, "invalid target dimension ", target[i]);
      known *= target[i];
    }
  }
  if (infer_axis >= 0) {
    ONYX_CHECK(known != 0 && in.numel() % known == 0, "cannot reshape ", in.str(), " (", in.numel(),
               " elements) with a -1 into a multiple of ", known);
    target[infer_axis] = in.numel() / known;
  }
  Shape out(target);
  ONYX_CHECK(out.numel() == in.numel(), "cannot reshape ", in.str(), " into ", out.str());
  ctx.set_output(0, ctx.input_dtype(0), out);
}

}  // namespace

void register_tensor_ops(OpRegistry& r) {
  r.add(OpDef{"", "Reshape", 5, infer_reshape, nullptr, {{0, 0}}});
  r.add(OpDef{"", "Identity", 1, [](InferContext& ctx) { infer_same_as_input(ctx); }, nullptr, {{0, 0}}});
}

}  // namespace onyx
