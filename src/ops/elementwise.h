// Shared pieces of the elementwise op family (elementwise.cpp, logical.cpp,
// unary.cpp, cast.cpp): broadcast loops with fast paths, wrapping integer
// arithmetic and the one numeric conversion that Cast and friends use.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu/thread_pool.h"
#include "ops/broadcast.h"
#include "ops/common.h"

namespace onyx {

using SignedNumericTypes = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t>;
using UnsignedTypes = TypeList<uint8_t, uint16_t, uint32_t, uint64_t>;

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <class T>
inline constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;

// Unsigned type at least as wide as int, so that arithmetic on it never
// promotes to a signed type (whose overflow would be undefined).
template <class T>
using wrap_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// Two's-complement wrapping arithmetic for integers; plain arithmetic otherwise.
template <class T>
T wrap_add(T a, T b) {
  if constexpr (is_int_v<T>) return static_cast<T>(static_cast<wrap_t<T>>(a) + static_cast<wrap_t<T>>(b));
  else return a + b;
}
template <class T>
T wrap_sub(T a, T b) {
  if constexpr (is_int_v<T>) return static_cast<T>(static_cast<wrap_t<T>>(a) - static_cast<wrap_t<T>>(b));
  else return a - b;
}
template <class T>
T wrap_mul(T a, T b) {
  if constexpr (is_int_v<T>) return static_cast<T>(static_cast<wrap_t<T>>(a) * static_cast<wrap_t<T>>(b));
  else return a * b;
}
template <class T>
T wrap_neg(T a) {
  if constexpr (is_int_v<T>) return static_cast<T>(wrap_t<T>(0) - static_cast<wrap_t<T>>(a));
  else return -a;
}

// Floating value -> integer D, truncating toward zero. Values that fit int64
// wrap modulo 2^bits into narrower types (as C and numpy do on x86: -1.0 ->
// uint8 255); NaN and values beyond int64 give the x86 "integer indefinite"
// bit pattern (INT64_MIN, truncated), never undefined behaviour.
template <class D>
D float_to_int(double v) {
  static_assert(is_int_v<D>);
  if (v > -9223372036854775808.0 && v < 9223372036854775808.0)
    return static_cast<D>(static_cast<int64_t>(v));
  if constexpr (std::is_same_v<D, uint64_t>)
    if (v >= 9223372036854775808.0 && v < 18446744073709551616.0) return static_cast<uint64_t>(v);
  return static_cast<D>(std::numeric_limits<int64_t>::min());
}

// Converts one element between any two numeric/bool element types the way
// ONNX Cast does: via float for the 16-bit floats, x != 0 for bool, truncation
// toward zero for floating -> integer.
template <class D, class S>
D convert_value(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (is_half_v<S>) {
    return convert_value<D>(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, bool>) {
    return s != S(0);
  } else if constexpr (is_half_v<D>) {
    return D(static_cast<float>(s));
  } else if constexpr (is_int_v<D> && std::is_floating_point_v<S>) {
    return float_to_int<D>(static_cast<double>(s));
  } else {
    return static_cast<D>(s);
  }
}

// When `small` broadcasts onto `out` by varying along one run of consecutive axes and being 1
// elsewhere (a bias [n] onto [.., n], a per-channel [C, 1, 1] onto [N, C, H, W], a mask
// [1, 1, 1, S] onto [B, H, S, S]): the element counts before, along and after that run.
struct BlockBroadcast {
  int64_t outer = 1, mid = 1, inner = 1;
};
inline bool block_broadcast(const Shape& small, const Shape& out, BlockBroadcast& bb) {
  const size_t r = out.rank();
  if (small.rank() > r) return false;
  const size_t off = r - small.rank();
  size_t first = r, last = 0;  // the run of axes where small matches out (and out's dim is not 1)
  for (size_t i = 0; i < r; ++i) {
    const int64_t d = i < off ? 1 : small[i - off];
    if (d == out[i] && d != 1) {
      if (first == r) first = i;
      else if (last + 1 != i) return false;  // a second run
      last = i;
    } else if (d != 1) {
      return false;
    }
  }
  if (first == r) return false;  // small is one element: handled apart
  bb = BlockBroadcast{};
  for (size_t i = 0; i < r; ++i) (i < first ? bb.outer : i <= last ? bb.mid : bb.inner) *= out[i];
  return true;
}

// body(b0, b1) over blocks [0, blocks) of `inner` elements each: on the intra-op pool when
// there are several blocks and enough elements (MobileNet's squeeze-and-excitation scale, a
// [C, 1, 1] factor onto [C, H, W]: serial, it read on one core the planes the depthwise
// convolution before it had written on both), chunks of at least 16384 elements.
template <class Body>
void parallel_blocks(int64_t blocks, int64_t inner, Body&& body) {
  if (blocks > 1 && blocks * inner >= 32768) {
    cpu::parallel_for(blocks, std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1)), body);
  } else {
    body(0, blocks);
  }
}

// out[i] = fn(a[ia], b[ib]) over numpy broadcasting. Equal element counts need
// no index arithmetic (a shape that broadcasts to `out` with out's element
// count has out's flat layout); a one-element side is hoisted out of the loop.
template <class A, class B, class R, class Fn>
void broadcast_binary(const Tensor& a, const Tensor& b, Tensor& out, Fn&& fn) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  R* po = out.data<R>();
  const int64_t na = a.numel(), nb = b.numel();
  if (na == n && nb == n) {
    for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[i], pb[i]);
  } else if (na == n && nb == 1) {
    const B vb = pb[0];
    for (int64_t i = 0; i < n; ++i) po[i] = fn(pa[i], vb);
  } else if (na == 1 && nb == n) {
    const A va = pa[0];
    for (int64_t i = 0; i < n; ++i) po[i] = fn(va, pb[i]);
  } else if (BlockBroadcast bb; na == n && block_broadcast(b.shape(), out.shape(), bb)) {
    if (bb.inner == 1) {  // b runs along the last axes: a row of b per outer index
      for (int64_t o = 0; o < bb.outer; ++o) {
        const A* ra = pa + o * bb.mid;
        R* ro = po + o * bb.mid;
        for (int64_t m = 0; m < bb.mid; ++m) ro[m] = fn(ra[m], pb[m]);
      }
    } else {  // one b value per block of `inner` elements (a per-channel scale), blocks split over the pool
      parallel_blocks(bb.outer * bb.mid, bb.inner, [&](int64_t om0, int64_t om1) {
        for (int64_t om = om0; om < om1; ++om) {
          const B vb = pb[om % bb.mid];
          const A* ra = pa + om * bb.inner;
          R* ro = po + om * bb.inner;
          for (int64_t i = 0; i < bb.inner; ++i) ro[i] = fn(ra[i], vb);
        }
      });
    }
  } else if (BlockBroadcast bb; nb == n && block_broadcast(a.shape(), out.shape(), bb)) {
    if (bb.inner == 1) {
      for (int64_t o = 0; o < bb.outer; ++o) {
        const B* rb = pb + o * bb.mid;
        R* ro = po + o * bb.mid;
        for (int64_t m = 0; m < bb.mid; ++m) ro[m] = fn(pa[m], rb[m]);
      }
    } else {
      parallel_blocks(bb.outer * bb.mid, bb.inner, [&](int64_t om0, int64_t om1) {
        for (int64_t om = om0; om < om1; ++om) {
          const A va = pa[om % bb.mid];
          const B* rb = pb + om * bb.inner;
          R* ro = po + om * bb.inner;
          for (int64_t i = 0; i < bb.inner; ++i) ro[i] = fn(va, rb[i]);
        }
      });
    }
  } else {
    for_each_broadcast<2>(out.shape(), {&a.shape(), &b.shape()},
                          [&](int64_t o, const std::array<int64_t, 2>& i) { po[o] = fn(pa[i[0]], pb[i[1]]); });
  }
}

// out[i] = fn(in[i]) for tensors of one shape.
template <class S, class R, class Fn>
void map_unary(const Tensor& in, Tensor& out, Fn&& fn) {
  const S* pi = in.data<S>();
  R* po = out.data<R>();
  const int64_t n = in.numel();
  for (int64_t i = 0; i < n; ++i) po[i] = fn(pi[i]);
}

// Logical/bitwise/comparison ops (logical.cpp); called by register_elementwise_ops.
void register_logical_ops(OpRegistry& r);

}  // namespace onyx
