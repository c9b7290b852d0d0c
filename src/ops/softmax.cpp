// Softmax, LogSoftmax and Hardmax over one axis.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/rowwise.h"
#include "ops/common.h"

namespace onyx {

namespace {
// ---- Softmax, LogSoftmax, Hardmax ----

enum class SM { kSoftmax, kLogSoftmax, kHardmax };

template <class T>
void softmax_kernel(KernelContext& ctx, SM kind) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t outer = 1, n = 1, inner = 1;
  if (ctx.opset() < 13) {
    // Before opset 13 the input is coerced to 2-D [prod(d[:axis]), prod(d[axis:])].
    int64_t axis = rank == 0 ? 0 : normalize_axis(ctx.attr_int("axis", 1), rank);
    for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : n) *= x.shape()[i];
  } else {
    ONYX_CHECK(rank >= 1, "input must have rank >= 1");
    int64_t axis = normalize_axis(ctx.attr_int("axis", -1), rank);
    for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : i == axis ? n : inner) *= x.shape()[i];
  }
  const T* px = x.data<T>();
  T* po = ctx.output(0).data<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (inner == 1 && kind != SM::kHardmax) {  // rows along the last axis: the vectorized kernel
      cpu::softmax_rows(px, po, outer, n, kind == SM::kLogSoftmax);
      return;
    }
  }
  using C = compute_t<T>;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      auto at = [&](int64_t j) { return base + j * inner; };
      C mx = -std::numeric_limits<C>::infinity();
      int64_t arg = 0;
      for (int64_t j = 0; j < n; ++j) {
        C v = static_cast<C>(px[at(j)]);
        if (v > mx) {
          mx = v;
          arg = j;
        }
      }
      if (kind == SM::kHardmax) {
        for (int64_t j = 0; j < n; ++j) po[at(j)] = static_cast<T>(C(j == arg ? 1 : 0));
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(static_cast<C>(px[at(j)])) - mx);
      if (kind == SM::kSoftmax) {
        for (int64_t j = 0; j < n; ++j)
          po[at(j)] = static_cast<T>(static_cast<C>(std::exp(static_cast<double>(static_cast<C>(px[at(j)])) - mx) / sum));
      } else {
        double ls = std::log(sum);
        for (int64_t j = 0; j < n; ++j)
          po[at(j)] = static_cast<T>(static_cast<C>(static_cast<double>(static_cast<C>(px[at(j)])) - mx - ls));
      }
    }
}

}  // namespace

void register_softmax_ops(OpRegistry& r) {
  const std::pair<const char*, SM> softmaxes[] = {
      {"Softmax", SM::kSoftmax}, {"LogSoftmax", SM::kLogSoftmax}, {"Hardmax", SM::kHardmax}};
  for (auto [name, kind] : softmaxes) {
    OpDef def = onnx_op(name, 1, [](InferContext& ctx) { infer_same_as_input(ctx); },
                        [name = name, kind = kind](KernelContext& ctx) {
                          dispatch<FloatTypes>(ctx.input(0).dtype(), name, [&](auto tag) {
                            softmax_kernel<typename decltype(tag)::type>(ctx, kind);
                          });
                        });
    if (kind != SM::kHardmax) def.in_place({0});  // each row is read whole before it is written
    r.add(std::move(def));
  }
}

}  // namespace onyx
