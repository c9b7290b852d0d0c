// Comparisons, boolean logic and bitwise ops: Equal Less Greater LessOrEqual
// GreaterOrEqual, And Or Xor Not, BitwiseAnd BitwiseOr BitwiseXor BitwiseNot,
// BitShift.
#include "ops/elementwise.h"

namespace onyx {

namespace {

template <class Types, class Fn>
void add_compare(OpRegistry& r, const char* name, int since, Fn fn) {
  r.add(onnx_op(name, since,
              [](InferContext& ctx) {
                check_same_dtypes(ctx);
                infer_broadcast(ctx, DType::kBool);
              },
              [name, fn](KernelContext& ctx) {
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  if constexpr (std::is_same_v<T, std::string>) {
                    broadcast_binary<T, T, bool>(ctx.input(0), ctx.input(1), ctx.output(0),
                                                 [&](const T& a, const T& b) { return fn(a, b); });
                  } else {
                    using C = compute_t<T>;
                    broadcast_binary<T, T, bool>(ctx.input(0), ctx.input(1), ctx.output(0), [&](T a, T b) {
                      return fn(static_cast<C>(a), static_cast<C>(b));
                    });
                  }
                });
              }));
}

// An op whose inputs and output share one integer or bool dtype.
template <class Types, class Fn>
void add_same_type(OpRegistry& r, const char* name, int since, Fn fn) {
  r.add(onnx_op(name, since,
              [](InferContext& ctx) {
                check_same_dtypes(ctx);
                infer_broadcast(ctx);
              },
              [name, fn](KernelContext& ctx) {
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  broadcast_binary<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0),
                                            [&](T a, T b) { return static_cast<T>(fn(a, b)); });
                });
              }));
}

template <class Types, class Fn>
void add_unary_same_type(OpRegistry& r, const char* name, int since, Fn fn) {
  r.add(onnx_op(name, since, [](InferContext& ctx) { infer_same_as_input(ctx); },
              [name, fn](KernelContext& ctx) {
                dispatch<Types>(ctx.input(0).dtype(), name, [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  map_unary<T, T>(ctx.input(0), ctx.output(0), [&](T a) { return static_cast<T>(fn(a)); });
                });
              }));
}

void register_bitshift(OpRegistry& r) {
  r.add(onnx_op("BitShift", 11,
              [](InferContext& ctx) {
                check_same_dtypes(ctx);
                std::string dir = ctx.attr_string("direction", "");
                ONYX_CHECK(dir == "LEFT" || dir == "RIGHT", "direction must be \"LEFT\" or \"RIGHT\", got \"", dir,
                           "\"");
                infer_broadcast(ctx);
              },
              [](KernelContext& ctx) {
                const bool left = ctx.attr_string("direction", "") == "LEFT";
                dispatch<UnsignedTypes>(ctx.input(0).dtype(), "BitShift", [&](auto tag) {
                  using T = typename decltype(tag)::type;
                  constexpr T kBits = sizeof(T) * 8;
                  // Shifting by the width or more is undefined in C++; every bit is shifted out.
                  broadcast_binary<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), [left](T a, T s) {
                    if (s >= kBits) return T(0);
                    return left ? static_cast<T>(static_cast<wrap_t<T>>(a) << s) : static_cast<T>(a >> s);
                  });
                });
              }));
}

}  // namespace

void register_logical_ops(OpRegistry& r) {
  using CompareTypes = NumericBoolTypes;
  using EqualTypes = AllTypes;
  add_compare<EqualTypes>(r, "Equal", 1, [](const auto& a, const auto& b) { return a == b; });
  add_compare<CompareTypes>(r, "Less", 1, [](auto a, auto b) { return a < b; });
  add_compare<CompareTypes>(r, "Greater", 1, [](auto a, auto b) { return a > b; });
  add_compare<CompareTypes>(r, "LessOrEqual", 12, [](auto a, auto b) { return a <= b; });
  add_compare<CompareTypes>(r, "GreaterOrEqual", 12, [](auto a, auto b) { return a >= b; });

  using BoolOnly = TypeList<bool>;
  add_same_type<BoolOnly>(r, "And", 1, [](bool a, bool b) { return a && b; });
  add_same_type<BoolOnly>(r, "Or", 1, [](bool a, bool b) { return a || b; });
  add_same_type<BoolOnly>(r, "Xor", 1, [](bool a, bool b) { return a != b; });
  add_unary_same_type<BoolOnly>(r, "Not", 1, [](bool a) { return !a; });

  add_same_type<IntTypes>(r, "BitwiseAnd", 18, [](auto a, auto b) { return a & b; });
  add_same_type<IntTypes>(r, "BitwiseOr", 18, [](auto a, auto b) { return a | b; });
  add_same_type<IntTypes>(r, "BitwiseXor", 18, [](auto a, auto b) { return a ^ b; });
  add_unary_same_type<IntTypes>(r, "BitwiseNot", 18, [](auto a) { return ~a; });
  register_bitshift(r);
}

}  // namespace onyx
