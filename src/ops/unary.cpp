// Elementwise ops of one input.
#include <cmath>

#include "ops/common.h"

namespace onyx {

namespace {

template <class Types, class Fn>
void add_unary(OpRegistry& r, const char* name, Fn fn) {
  r.add(OpDef{"", name, 1, [](InferContext& ctx) { infer_same_as_input(ctx); },
              [name, fn](KernelContext& ctx) {
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  using C = compute_t<T>;
                  const T* in = ctx.input(0).data<T>();
                  T* out = ctx.output(0).data<T>();
                  int64_t n = ctx.input(0).numel();
                  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(fn(static_cast<C>(in[i])));
                });
              }});
}

}  // namespace

void register_unary_ops(OpRegistry& r) {
  add_unary<NumericTypes>(r, "Relu", [](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); });
}

}  // namespace onyx
