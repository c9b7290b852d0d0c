// numpy.matmul's shape rules and batch layout, shared by MatMul and the quantized matrix products.
#pragma once

#include <vector>

#include "ops/op.h"

namespace onyx {

// Output 0 of A x B under numpy.matmul's rules (1-D operands are promoted and the added
// axis dropped, batch dimensions broadcast), with dtype `dt`; A and B are inputs `a`, `b`.
void infer_matmul_shape(InferContext& ctx, DType dt, size_t a = 0, size_t b = 1);

// The batch layout of a numpy-style matmul: per broadcast batch entry, the element
// offsets of its A and B matrices.
struct MatmulPlan {
  int64_t m = 0, k = 0, n = 0;
  std::vector<int64_t> off_a, off_b;
};

MatmulPlan plan_matmul(const Shape& a, const Shape& b);

}  // namespace onyx
