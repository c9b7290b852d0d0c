// onyx.genai::CacheUpdate, the op a static KV cache is made of: out = cache with `new`
// written at positions [index, index + S) of the sequence axis. Bound to the tensor fed
// as `cache` (RunOptions::bound_outputs), it writes only the new entries: the cache is
// updated in place, and its shape, so the step's signature, never changes (DESIGN L11).
//
//   inputs:  cache [.., C, ..], new [.., S, ..] (the same dims but the sequence axis),
//            index int64: one position for every row, or one per row of the batch (dimension
//            0) — the first position written; data, not shape
//   attribute: axis (default 2: [batch, kv heads, positions, head size])
#include <cstring>

#include "ops/common.h"
#include "ops/tensor_util.h"

namespace onyx {

namespace {

struct CacheGeometry {
  int64_t outer = 1, capacity = 0, length = 0, inner = 1;  // [outer, C|S, inner] views
};

CacheGeometry cache_geometry(const NodeView& n, const Shape& cache, const Shape& fresh) {
  ONYX_CHECK(cache.rank() == fresh.rank() && cache.rank() >= 1, "cache ", cache.str(), " and new ", fresh.str(),
             " must have one rank");
  const int64_t axis = normalize_axis(n.attr_int("axis", 2), static_cast<int64_t>(cache.rank()));
  CacheGeometry g;
  for (int64_t a = 0; a < static_cast<int64_t>(cache.rank()); ++a) {
    if (a == axis) continue;
    ONYX_CHECK(cache[a] == fresh[a], "new ", fresh.str(), " does not fit cache ", cache.str(), " at axis ", a);
    (a < axis ? g.outer : g.inner) *= cache[a];
  }
  g.capacity = cache[axis];
  g.length = fresh[axis];
  ONYX_CHECK(g.length <= g.capacity, "new ", fresh.str(), " has more positions than the cache ", cache.str(), " holds");
  return g;
}

void infer_cache_update(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(1) == ctx.input_dtype(0), "new (", dtype_name(ctx.input_dtype(1)),
             ") must have the cache's dtype (", dtype_name(ctx.input_dtype(0)), ")");
  ONYX_CHECK(ctx.input_dtype(2) == DType::kInt64, "index must be int64, got ", dtype_name(ctx.input_dtype(2)));
  if (ctx.input_shape(0).fully_known() && ctx.input_shape(1).fully_known())
    cache_geometry(ctx, ctx.input_concrete_shape(0), ctx.input_concrete_shape(1));
  if (ctx.input_shape(2).fully_known() && ctx.input_shape(0).fully_known()) {
    const int64_t n = ctx.input_concrete_shape(2).numel(), rows = ctx.input_concrete_shape(0)[0];
    ONYX_CHECK(n == 1 || (n == rows && normalize_axis(ctx.attr_int("axis", 2), static_cast<int64_t>(ctx.input_concrete_shape(0).rank())) > 0),
               "index must hold one position or one per row (", rows, "), got ", ctx.input_shape(2).str());
  }
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0));
}

void cache_update_kernel(KernelContext& ctx) {
  const Tensor& cache = ctx.input(0);
  const Tensor& fresh = ctx.input(1);
  Tensor& out = ctx.output(0);
  const CacheGeometry g = cache_geometry(ctx, cache.shape(), fresh.shape());
  const Tensor& index = ctx.input(2);
  const int64_t rows = cache.shape()[0], per_row = g.outer / std::max<int64_t>(rows, 1);
  ONYX_CHECK(index.numel() == 1 || (index.numel() == rows && g.outer % std::max<int64_t>(rows, 1) == 0),
             "index must hold one position or one per row (", rows, "), got ", index.type_str());
  for (int64_t i = 0; i < index.numel(); ++i) {
    const int64_t at = index.get_as_int64(i);
    ONYX_CHECK(at >= 0 && at + g.length <= g.capacity, "writing ", g.length, " positions at ", at,
               index.numel() > 1 ? cat(" (row ", i, ")") : std::string(), " overruns the cache of ", g.capacity);
  }
  dispatch_storage(cache.dtype(), "CacheUpdate", [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* c = static_cast<const U*>(cache.raw());
    const U* f = static_cast<const U*>(fresh.raw());
    U* o = static_cast<U*>(out.raw());
    const int64_t row = g.inner;  // elements per position
    for (int64_t b = 0; b < g.outer; ++b) {
      const int64_t index = ctx.input(2).get_as_int64(ctx.input(2).numel() == 1 ? 0 : b / per_row);
      if (o != c)  // not bound to the cache itself: carry the old entries over
        for (int64_t i = 0; i < g.capacity * row; ++i) o[b * g.capacity * row + i] = c[b * g.capacity * row + i];
      for (int64_t i = 0; i < g.length * row; ++i) o[(b * g.capacity + index) * row + i] = f[b * g.length * row + i];
    }
  });
}

}  // namespace

void register_sample_op(OpRegistry& r);  // sampling.cpp

void register_genai_ops(OpRegistry& r) {
  register_sample_op(r);
  r.add(domain_op("onyx.genai", "CacheUpdate", 1, infer_cache_update, cache_update_kernel).may_update(0, 0));
}

}  // namespace onyx
