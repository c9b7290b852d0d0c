// Helpers for the data-movement ops (tensor_ops, layout_ops, slice_pad, gather_scatter).
#pragma once

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"
#include "ops/common.h"

namespace onyx {

// Data movement does not care what the bits mean, only how wide an element is:
// dispatching on width keeps one instantiation per width instead of per dtype.
// Calls fn(std::type_identity<U>{}) with U = uint8_t/uint16_t/uint32_t/uint64_t or std::string.
template <class Fn>
void dispatch_storage(DType dt, std::string_view what, Fn&& fn) {
  if (dt == DType::kString) return fn(std::type_identity<std::string>{});
  switch (dt == DType::kUndefined ? 0 : dtype_size(dt)) {
    case 1:
      return fn(std::type_identity<uint8_t>{});
    case 2:
      return fn(std::type_identity<uint16_t>{});
    case 4:
      return fn(std::type_identity<uint32_t>{});
    case 8:
      return fn(std::type_identity<uint64_t>{});
    default:
      throw Error(cat(what, ": element type ", dtype_name(dt), " is not supported"));
  }
}

// Copies `count` elements of src starting at element `src_off` to dst at `dst_off`.
inline void copy_elements(const Tensor& src, int64_t src_off, Tensor& dst, int64_t dst_off, int64_t count) {
  if (count <= 0) return;
  if (src.dtype() == DType::kString) {
    const std::string* s = src.data<std::string>() + src_off;
    std::string* d = dst.data<std::string>() + dst_off;
    for (int64_t i = 0; i < count; ++i) d[i] = s[i];
    return;
  }
  const size_t w = dtype_size(src.dtype());
  std::memcpy(static_cast<char*>(dst.raw()) + dst_off * w, static_cast<const char*>(src.raw()) + src_off * w,
              static_cast<size_t>(count) * w);
}

// out[i0..ik] = in[base + sum_a i_a * strides[a]] over an output of `dims`, row-major.
// Strides may be zero (broadcast) or negative (reversal); the caller guarantees bounds. The
// output's rows (its last dimension) are split over the intra-op pool from 32K elements on.
template <class T>
void strided_copy(const T* in, int64_t base, std::span<const int64_t> dims, const std::vector<int64_t>& strides,
                  T* out) {
  const size_t r = dims.size();
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  if (total == 0) return;
  if (r == 0) {
    out[0] = in[base];
    return;
  }
  const int64_t inner = dims[r - 1], step = strides[r - 1];
  // Output rows [row0, row1): the input offset of row0 from its index over the outer dimensions,
  // then a counter carried from row to row.
  auto copy_rows = [&](int64_t row0, int64_t row1) {
    std::vector<int64_t> counter(r, 0);
    int64_t off = base;
    int64_t left = row0;
    for (size_t a = r - 1; a-- > 0;) {
      counter[a] = left % dims[a];
      left /= dims[a];
      off += counter[a] * strides[a];
    }
    for (int64_t row = row0; row < row1; ++row) {
      const T* p = in + off;
      T* o = out + row * inner;
      if (step == 1) {
        for (int64_t j = 0; j < inner; ++j) o[j] = p[j];
      } else {
        for (int64_t j = 0; j < inner; ++j) o[j] = p[j * step];
      }
      for (size_t a = r - 1; a-- > 0;) {
        off += strides[a];
        if (++counter[a] < dims[a]) break;
        off -= strides[a] * counter[a];
        counter[a] = 0;
      }
    }
  };
  const int64_t rows = total / inner;
  if (total < (int64_t{1} << 15)) return copy_rows(0, rows);
  cpu::parallel_for(rows, std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(inner, 1)), copy_rows);
}

// strided_copy on whole tensors of any dtype.
inline void strided_copy(const Tensor& in, int64_t base, std::span<const int64_t> dims,
                         const std::vector<int64_t>& strides, Tensor& out, std::string_view what) {
  dispatch_storage(in.dtype(), what, [&](auto tag) {
    using U = typename decltype(tag)::type;
    strided_copy<U>(in.data<U>(), base, dims, strides, out.data<U>());
  });
}

// An int64/int32 input's values when known, nullopt otherwise (planning without data).
inline std::optional<std::vector<int64_t>> known_ints(const InferContext& ctx, size_t i) {
  if (!ctx.input_value(i)) return std::nullopt;
  return input_ints(ctx, i);
}

// Whether input i's shape is fully known.
inline bool shape_known(const InferContext& ctx, size_t i) { return ctx.input_shape(i).fully_known(); }

// The inputs of a node with many optional ones, as the ops' shared checks take them: per input
// index its dtype (kUndefined when omitted) and, when every present input's shape is known, its
// shape (null when omitted). `known` is false while some present shape is still unknown.
struct PresentInputs {
  std::vector<DType> dtypes;
  bool known = true;
  std::vector<Shape> shapes;
  std::vector<const Shape*> shape_ptrs;
};
inline PresentInputs present_inputs(const InferContext& ctx) {
  const size_t n = ctx.num_inputs();
  PresentInputs p;
  p.dtypes.assign(n, DType::kUndefined);
  for (size_t i = 0; i < n; ++i)
    if (ctx.has_input(i)) {
      p.dtypes[i] = ctx.input_dtype(i);
      p.known &= ctx.input_shape(i).fully_known();
    }
  if (!p.known) return p;
  p.shapes.resize(n);
  p.shape_ptrs.assign(n, nullptr);
  for (size_t i = 0; i < n; ++i)
    if (ctx.has_input(i)) {
      p.shapes[i] = ctx.input_concrete_shape(i);
      p.shape_ptrs[i] = &p.shapes[i];
    }
  return p;
}

// Reads a tensor's element i as an index (int32 or int64 tensors).
inline int64_t index_at(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kInt32 ? t.data<int32_t>()[i] : t.data<int64_t>()[i];
}

// Checks an index tensor's dtype (int32 or int64).
inline void check_index_dtype(DType dt, std::string_view what) {
  ONYX_CHECK(dt == DType::kInt32 || dt == DType::kInt64, what, " must be int32 or int64, got ", dtype_name(dt));
}

// Normalizes index `idx` into [0, size) (negative counts from the end); throws naming the value.
inline int64_t checked_index(int64_t idx, int64_t size, int64_t axis, std::string_view what = "index") {
  ONYX_CHECK(idx >= -size && idx < size, what, " ", idx, " is out of range for axis ", axis, " of size ", size,
             " (valid: [", -size, ", ", size - 1, "])");
  return idx < 0 ? idx + size : idx;
}

}  // namespace onyx
