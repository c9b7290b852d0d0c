// Checked size arithmetic: the one way onyx computes element counts, dimensions and
// byte sizes from values a model supplies. A result that does not fit is an error
// (the caller's context names the node), never a wrapped number.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "onyx/dtype.h"
#include "onyx/error.h"

namespace onyx {

// The most bytes one tensor, arena or offset may span: what a signed 64-bit offset reaches.
inline constexpr size_t kMaxBytes = static_cast<size_t>(std::numeric_limits<int64_t>::max());

// a * b for sizes (both >= 0); throws naming `what` when the product exceeds int64.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what = "size") {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw Error(cat(what, " overflows 64 bits (", a, " * ", b, ")"));
  return r;
}

// a + b for sizes; throws naming `what` when the sum exceeds int64.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what = "size") {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw Error(cat(what, " overflows 64 bits (", a, " + ", b, ")"));
  return r;
}

// Byte sizes: a + b and a * b within kMaxBytes.
inline size_t checked_add_bytes(size_t a, size_t b, std::string_view what = "byte size") {
  size_t r = 0;
  if (__builtin_add_overflow(a, b, &r) || r > kMaxBytes)
    throw Error(cat(what, " needs more bytes than an address space holds (", a, " + ", b, ")"));
  return r;
}
inline size_t checked_mul_bytes(size_t a, size_t b, std::string_view what = "byte size") {
  size_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || r > kMaxBytes)
    throw Error(cat(what, " needs more bytes than an address space holds (", a, " * ", b, ")"));
  return r;
}

// The product of dims (each >= 0), checked; 0 when any dim is 0, however large the others.
inline int64_t checked_product(std::span<const int64_t> dims, std::string_view what = "element count") {
  for (int64_t d : dims)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : dims) n = checked_mul(n, d, what);
  return n;
}
inline int64_t checked_product(const std::vector<int64_t>& dims, std::string_view what = "element count") {
  return checked_product(std::span<const int64_t>(dims.data(), dims.size()), what);
}

// The bytes of `numel` elements of `dtype` (strings count as 0 bytes, as in Tensor), checked.
inline size_t checked_bytes(int64_t numel, DType dtype, std::string_view what = "tensor") {
  ONYX_CHECK(numel >= 0, what, " has a negative element count ", numel);
  return checked_mul_bytes(static_cast<size_t>(numel), dtype_size(dtype), what);
}

// checked_bytes with the description made by what() only when the check fails: for hot paths
// (every tensor made, every value planned), where building the string would cost more than the rest.
template <class What>
inline size_t checked_bytes_lazy(int64_t numel, DType dtype, What&& what) {
  const size_t per = dtype_size(dtype);
  if (numel >= 0 && (per == 0 || static_cast<uint64_t>(numel) <= SIZE_MAX / per)) return static_cast<size_t>(numel) * per;
  return checked_bytes(numel, dtype, what());
}

// Rounds bytes up to a multiple of alignment (> 0), checked.
inline size_t checked_align_up(size_t bytes, size_t alignment, std::string_view what = "aligned size") {
  size_t r = checked_add_bytes(bytes, alignment - 1, what);
  return r / alignment * alignment;
}

}  // namespace onyx
