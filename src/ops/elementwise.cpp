// Binary and variadic elementwise ops with numpy broadcasting.
#include <cmath>

#include "ops/broadcast.h"
#include "ops/common.h"

namespace onyx {

namespace {

// out[i] = fn(a[ia], b[ib]) in T's compute type; R is the output element type.
template <class T, class R, class Fn>
void binary_kernel(KernelContext& ctx, Fn fn) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  R* po = out.data<R>();
  using C = compute_t<T>;
  for_each_broadcast<2>(out.shape(), {&a.shape(), &b.shape()}, [&](int64_t o, const std::array<int64_t, 2>& i) {
    po[o] = static_cast<R>(fn(static_cast<C>(pa[i[0]]), static_cast<C>(pb[i[1]])));
  });
}

// Registers an arithmetic op whose output dtype equals its inputs'.
template <class Types, class Fn>
void add_arith(OpRegistry& r, const char* name, Fn fn) {
  r.add(OpDef{"", name, 1,
              [](InferContext& ctx) {
                check_same_dtypes(ctx);
                infer_broadcast(ctx);
              },
              [name, fn](KernelContext& ctx) {
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  binary_kernel<T, T>(ctx, fn);
                });
              }});
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  add_arith<NumericTypes>(r, "Add", [](auto a, auto b) { return a + b; });
  add_arith<NumericTypes>(r, "Sub", [](auto a, auto b) { return a - b; });
  add_arith<NumericTypes>(r, "Mul", [](auto a, auto b) { return a * b; });
}

}  // namespace onyx
