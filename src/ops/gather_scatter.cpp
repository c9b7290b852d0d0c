// Indexing ops: Gather, GatherElements, GatherND, ScatterElements (and its old
// name Scatter), ScatterND, Compress, NonZero. Every index is validated.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>

#include "ops/tensor_util.h"

namespace onyx {

namespace {

int64_t product(std::span<const int64_t> d, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) p *= d[i];
  return p;
}

// Walks `dims` row-major, calling fn(flat, offset) with offset = sum_a coord[a] * strides[a].
template <class Fn>
void walk(std::span<const int64_t> dims, const std::vector<int64_t>& strides, Fn&& fn) {
  const int64_t total = product(dims, 0, dims.size());
  if (total == 0) return;
  const size_t r = dims.size();
  std::vector<int64_t> counter(r, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < total; ++i) {
    fn(i, off);
    for (size_t a = r; a-- > 0;) {
      off += strides[a];
      if (++counter[a] < dims[a]) break;
      off -= strides[a] * counter[a];
      counter[a] = 0;
    }
  }
}

// ---- Gather ---------------------------------------------------------------

void infer_gather(InferContext& ctx) {
  check_index_dtype(ctx.input_dtype(1), "Gather indices");
  const PartialShape& data = ctx.input_shape(0);
  const PartialShape& ind = ctx.input_shape(1);
  if (!data.rank_known || !ind.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  const int64_t r = static_cast<int64_t>(data.dims.size());
  ONYX_CHECK(r >= 1, "Gather needs data of rank >= 1");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), r);
  PartialShape out = PartialShape::of_rank(0);
  out.dims.assign(data.dims.begin(), data.dims.begin() + axis);
  out.dims.insert(out.dims.end(), ind.dims.begin(), ind.dims.end());
  out.dims.insert(out.dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void gather_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& out = ctx.output(0);
  const auto& d = data.shape().dims();
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(d.size()));
  const int64_t outer = product(d, 0, axis), size = d[axis], inner = product(d, axis + 1, d.size());
  const int64_t n = ind.numel();
  // Validate every index up front, so nothing is written on failure; a few fit on the stack.
  std::array<int64_t, 16> few;
  std::vector<int64_t> many(n > static_cast<int64_t>(few.size()) ? n : 0);
  int64_t* idx = many.empty() ? few.data() : many.data();
  for (int64_t i = 0; i < n; ++i) idx[i] = checked_index(index_at(ind, i), size, axis, "Gather index");
  dispatch_storage(data.dtype(), "Gather", [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* p = data.data<U>();
    U* q = out.data<U>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < n; ++i) {
        const U* src = p + (o * size + idx[i]) * inner;
        U* dst = q + (o * n + i) * inner;
        for (int64_t j = 0; j < inner; ++j) dst[j] = src[j];
      }
  });
}

// ---- GatherElements, ScatterElements --------------------------------------

// Checks that `ind` (indices or updates) fits in `data` along every axis but `axis`.
void check_elements_shapes(const Shape& data, const Shape& ind, int64_t axis, std::string_view what) {
  ONYX_CHECK(data.rank() == ind.rank(), what, ": indices have rank ", ind.rank(), ", data has rank ", data.rank());
  for (size_t a = 0; a < data.rank(); ++a)
    ONYX_CHECK(static_cast<int64_t>(a) == axis || ind[a] <= data[a], what, ": indices shape ", ind.str(),
               " exceeds data shape ", data.str(), " on axis ", a);
}

// Data strides with the indexed axis zeroed: the offset of an indices position, minus the axis.
std::vector<int64_t> strides_without(const Shape& s, int64_t axis) {
  auto st = s.strides();
  st[axis] = 0;
  return st;
}

void infer_gather_elements(InferContext& ctx) {
  check_index_dtype(ctx.input_dtype(1), "GatherElements indices");
  ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(1));
}

void gather_elements_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& out = ctx.output(0);
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(data.rank()));
  check_elements_shapes(data.shape(), ind.shape(), axis, "GatherElements");
  const int64_t size = data.shape()[axis], stride = data.shape().strides()[axis];
  auto st = strides_without(data.shape(), axis);
  dispatch_storage(data.dtype(), "GatherElements", [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* p = data.data<U>();
    U* q = out.data<U>();
    walk(ind.shape().dims(), st, [&](int64_t i, int64_t off) {
      q[i] = p[off + checked_index(index_at(ind, i), size, axis, "GatherElements index") * stride];
    });
  });
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Reduction reduction_of(const NodeView& n) {
  std::string s = n.attr_string("reduction", "none");
  if (s == "none") return Reduction::kNone;
  if (s == "add") return Reduction::kAdd;
  if (s == "mul") return Reduction::kMul;
  if (s == "max") return Reduction::kMax;
  if (s == "min") return Reduction::kMin;
  throw Error(cat("unknown reduction '", s, "' (expected none, add, mul, max or min)"));
}

// Runs body(tag, apply) where tag names the element type U and apply(U* dst, const U* src)
// folds src into dst per the reduction; plain assignment works on any dtype, the
// others on numeric ones.
template <class Body>
void with_reduction(DType dt, Reduction red, std::string_view what, Body&& body) {
  if (red == Reduction::kNone) {
    dispatch_storage(dt, what, [&](auto tag) {
      using U = typename decltype(tag)::type;
      body(tag, [](U* d, const U* s) { *d = *s; });
    });
    return;
  }
  dispatch<NumericTypes>(dt, what, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    body(tag, [red](T* d, const T* s) {
      C a = static_cast<C>(*d), b = static_cast<C>(*s);
      switch (red) {
        case Reduction::kAdd:
          a = static_cast<C>(a + b);
          break;
        case Reduction::kMul:
          a = static_cast<C>(a * b);
          break;
        case Reduction::kMax:
          a = std::max(a, b);
          break;
        case Reduction::kMin:
          a = std::min(a, b);
          break;
        case Reduction::kNone:
          a = b;
          break;
      }
      *d = static_cast<T>(a);
    });
  });
}

void scatter_elements_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  Tensor& out = ctx.output(0);
  const int64_t axis = normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(data.rank()));
  check_index_dtype(ind.dtype(), "ScatterElements indices");
  ONYX_CHECK(upd.shape() == ind.shape(), "ScatterElements: updates shape ", upd.shape().str(),
             " differs from indices shape ", ind.shape().str());
  ONYX_CHECK(upd.dtype() == data.dtype(), "ScatterElements: updates are ", dtype_name(upd.dtype()), ", data is ",
             dtype_name(data.dtype()));
  check_elements_shapes(data.shape(), ind.shape(), axis, "ScatterElements");
  const int64_t size = data.shape()[axis], stride = data.shape().strides()[axis];
  auto st = strides_without(data.shape(), axis);
  // Resolve all targets first, so a bad index leaves no partial result behind.
  std::vector<int64_t> target(ind.numel());
  walk(ind.shape().dims(), st, [&](int64_t i, int64_t off) {
    target[i] = off + checked_index(index_at(ind, i), size, axis, "ScatterElements index") * stride;
  });
  copy_elements(data, 0, out, 0, data.numel());
  const Reduction red = ctx.opset() >= 16 ? reduction_of(ctx) : Reduction::kNone;
  with_reduction(data.dtype(), red, "ScatterElements", [&](auto tag, auto apply) {
    using U = typename decltype(tag)::type;
    const U* u = upd.data<U>();
    U* q = out.data<U>();
    for (int64_t i = 0; i < ind.numel(); ++i) apply(q + target[i], u + i);
  });
}

void infer_scatter_elements(InferContext& ctx) {
  check_index_dtype(ctx.input_dtype(1), "ScatterElements indices");
  ONYX_CHECK(ctx.input_dtype(2) == ctx.input_dtype(0), "ScatterElements: updates are ", dtype_name(ctx.input_dtype(2)),
             ", data is ", dtype_name(ctx.input_dtype(0)));
  if (ctx.opset() >= 16) reduction_of(ctx);  // reject unknown reductions early
  infer_same_as_input(ctx);
}

// ---- GatherND, ScatterND --------------------------------------------------

// Flat data offset of the index tuple `tuple[0..m)` into data axes [first, first+m).
int64_t tuple_offset(const Tensor& ind, int64_t at, int64_t m, const Shape& data, const std::vector<int64_t>& st,
                     size_t first, std::string_view what) {
  int64_t off = 0;
  for (int64_t a = 0; a < m; ++a) {
    const size_t axis = first + a;
    off += checked_index(index_at(ind, at + a), data[axis], static_cast<int64_t>(axis), what) * st[axis];
  }
  return off;
}

int64_t batch_dims_of(const NodeView& n, size_t data_rank, size_t ind_rank) {
  int64_t b = n.opset() >= 12 ? n.attr_int("batch_dims", 0) : 0;
  ONYX_CHECK(b >= 0 && b < static_cast<int64_t>(std::min(data_rank, ind_rank)), "GatherND: batch_dims ", b,
             " must be in [0, min(data rank ", data_rank, ", indices rank ", ind_rank, "))");
  return b;
}

void infer_gather_nd(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(1) == DType::kInt64, "GatherND indices must be int64, got ",
             dtype_name(ctx.input_dtype(1)));
  const PartialShape& data = ctx.input_shape(0);
  const PartialShape& ind = ctx.input_shape(1);
  if (!data.rank_known || !ind.rank_known || ind.dims.empty() || ind.dims.back() == PartialShape::kUnknown) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  const int64_t b = batch_dims_of(ctx, data.dims.size(), ind.dims.size());
  const int64_t m = ind.dims.back();
  ONYX_CHECK(m >= 1 && b + m <= static_cast<int64_t>(data.dims.size()), "GatherND: index tuples of length ", m,
             " with batch_dims ", b, " do not fit data of rank ", data.dims.size());
  PartialShape out = PartialShape::of_rank(0);
  out.dims.assign(ind.dims.begin(), ind.dims.end() - 1);
  out.dims.insert(out.dims.end(), data.dims.begin() + b + m, data.dims.end());
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void gather_nd_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  Tensor& out = ctx.output(0);
  const auto& dd = data.shape().dims();
  const auto& id = ind.shape().dims();
  const int64_t b = batch_dims_of(ctx, dd.size(), id.size());
  const int64_t m = id.back();
  for (int64_t a = 0; a < b; ++a)
    ONYX_CHECK(dd[a] == id[a], "GatherND: batch axis ", a, " has size ", dd[a], " in data but ", id[a], " in indices");
  const int64_t batches = product(dd, 0, b);
  const int64_t tuples = product(id, b, id.size() - 1);  // per batch
  const int64_t slice = product(dd, b + m, dd.size());
  const int64_t data_batch = product(dd, b, dd.size());
  const auto st = data.shape().strides();
  std::vector<int64_t> offs(batches * tuples);
  for (int64_t bi = 0; bi < batches; ++bi)
    for (int64_t t = 0; t < tuples; ++t)
      offs[bi * tuples + t] =
          bi * data_batch + tuple_offset(ind, (bi * tuples + t) * m, m, data.shape(), st, b, "GatherND index");
  for (size_t i = 0; i < offs.size(); ++i) copy_elements(data, offs[i], out, static_cast<int64_t>(i) * slice, slice);
}

void infer_scatter_nd(InferContext& ctx) {
  ONYX_CHECK(ctx.input_dtype(1) == DType::kInt64, "ScatterND indices must be int64, got ",
             dtype_name(ctx.input_dtype(1)));
  ONYX_CHECK(ctx.input_dtype(2) == ctx.input_dtype(0), "ScatterND: updates are ", dtype_name(ctx.input_dtype(2)),
             ", data is ", dtype_name(ctx.input_dtype(0)));
  if (ctx.opset() >= 16) reduction_of(ctx);
  infer_same_as_input(ctx);
}

void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& data = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  const Tensor& upd = ctx.input(2);
  Tensor& out = ctx.output(0);
  const auto& dd = data.shape().dims();
  const auto& id = ind.shape().dims();
  ONYX_CHECK(!id.empty(), "ScatterND: indices must have rank >= 1");
  const int64_t m = id.back();
  ONYX_CHECK(m >= 1 && m <= static_cast<int64_t>(dd.size()), "ScatterND: index tuples of length ", m,
             " do not fit data of rank ", dd.size());
  std::vector<int64_t> want(id.begin(), id.end() - 1);
  want.insert(want.end(), dd.begin() + m, dd.end());
  ONYX_CHECK(upd.shape().dims() == want, "ScatterND: updates have shape ", upd.shape().str(), ", expected ",
             Shape(want).str());
  const int64_t tuples = product(id, 0, id.size() - 1);
  const int64_t slice = product(dd, m, dd.size());
  const auto st = data.shape().strides();
  std::vector<int64_t> offs(tuples);
  for (int64_t t = 0; t < tuples; ++t) offs[t] = tuple_offset(ind, t * m, m, data.shape(), st, 0, "ScatterND index");
  copy_elements(data, 0, out, 0, data.numel());
  const Reduction red = ctx.opset() >= 16 ? reduction_of(ctx) : Reduction::kNone;
  with_reduction(data.dtype(), red, "ScatterND", [&](auto tag, auto apply) {
    using U = typename decltype(tag)::type;
    const U* u = upd.data<U>();
    U* q = out.data<U>();
    for (int64_t t = 0; t < tuples; ++t)
      for (int64_t j = 0; j < slice; ++j) apply(q + offs[t] + j, u + t * slice + j);
  });
}

// ---- Compress, NonZero ----------------------------------------------------

// Positions along the compressed axis (of size `dim`) that the condition keeps.
std::vector<int64_t> compress_keep(const Tensor& cond, int64_t dim) {
  ONYX_CHECK(cond.dtype() == DType::kBool && cond.rank() == 1, "Compress: condition must be a 1-D bool tensor, got ",
             cond.type_str());
  std::vector<int64_t> keep;
  const bool* c = cond.data<bool>();
  for (int64_t i = 0; i < cond.numel(); ++i) {
    if (!c[i]) continue;
    ONYX_CHECK(i < dim, "Compress: condition selects position ", i, ", but the axis has size ", dim);
    keep.push_back(i);
  }
  return keep;
}

void infer_compress(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  const Tensor* cond = ctx.input_value(1);
  const bool has_axis = ctx.has_attr("axis");
  if (!in.fully_known() || !cond) {
    ctx.set_output(0, ctx.input_dtype(0),
                   has_axis && in.rank_known ? PartialShape::of_rank(in.dims.size()) : PartialShape::of_rank(1));
    return;
  }
  Shape s = in.to_shape();
  if (!has_axis) {
    ctx.set_output(0, ctx.input_dtype(0), Shape{static_cast<int64_t>(compress_keep(*cond, s.numel()).size())});
    return;
  }
  const int64_t axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(s.rank()));
  s[axis] = static_cast<int64_t>(compress_keep(*cond, s[axis]).size());
  ctx.set_output(0, ctx.input_dtype(0), s);
}

void compress_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  int64_t outer = 1, dim = in.numel(), inner = 1;
  if (ctx.has_attr("axis")) {
    const auto& d = in.shape().dims();
    const int64_t axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(d.size()));
    outer = product(d, 0, axis);
    dim = d[axis];
    inner = product(d, axis + 1, d.size());
  }
  auto keep = compress_keep(ctx.input(1), dim);
  const int64_t k = static_cast<int64_t>(keep.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < k; ++i) copy_elements(in, (o * dim + keep[i]) * inner, out, (o * k + i) * inner, inner);
}

void nonzero_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  std::vector<int64_t> hits;  // flat positions of the non-zero elements
  if (in.dtype() == DType::kString) {
    const std::string* p = in.data<std::string>();
    for (int64_t i = 0; i < in.numel(); ++i)
      if (!p[i].empty()) hits.push_back(i);
  } else {
    dispatch<NumericBoolTypes>(in.dtype(), "NonZero", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = in.data<T>();
      for (int64_t i = 0; i < in.numel(); ++i)
        if (static_cast<compute_t<T>>(p[i]) != compute_t<T>{}) hits.push_back(i);
    });
  }
  // A scalar counts as a 1-D tensor of one element.
  const Shape shape = in.rank() == 0 ? Shape{1} : in.shape();
  const int64_t r = static_cast<int64_t>(shape.rank()), n = static_cast<int64_t>(hits.size());
  Tensor& out = ctx.allocate_output(0, DType::kInt64, Shape{r, n});
  int64_t* q = out.data<int64_t>();
  const auto st = shape.strides();
  for (int64_t j = 0; j < n; ++j)
    for (int64_t a = 0; a < r; ++a) q[a * n + j] = (hits[j] / st[a]) % shape[a];
}

}  // namespace

// ---- TensorScatter(past_cache, update, write_indices? [batch]) -> present_cache ----
// Writes update's positions along `axis` into a copy of the cache, starting per batch row at
// write_indices (0 when absent); "circular" wraps past the cache's length, "linear" must fit.

void infer_tensor_scatter(InferContext& ctx) {
  const Shape cache = ctx.input_concrete_shape(0), update = ctx.input_concrete_shape(1);
  ONYX_CHECK(ctx.input_dtype(1) == ctx.input_dtype(0), "update is ", dtype_name(ctx.input_dtype(1)), ", the cache ",
             dtype_name(ctx.input_dtype(0)));
  ONYX_CHECK(cache.rank() >= 2 && update.rank() == cache.rank(), "past_cache ", cache.str(), " and update ",
             update.str(), " must have one rank of at least 2");
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -2), static_cast<int64_t>(cache.rank()));
  ONYX_CHECK(axis > 0, "axis must not be the batch axis");
  for (size_t i = 0; i < cache.rank(); ++i)
    ONYX_CHECK(static_cast<int64_t>(i) == axis ? update[i] <= cache[i] : update[i] == cache[i], "update ",
               update.str(), " does not fit past_cache ", cache.str(), " at axis ", i);
  const std::string mode = ctx.attr_string("mode", "linear");
  ONYX_CHECK(mode == "linear" || mode == "circular", "mode must be \"linear\" or \"circular\", got \"", mode, "\"");
  if (ctx.has_input(2))
    ONYX_CHECK(ctx.input_concrete_shape(2) == Shape({cache[0]}), "write_indices must be [", cache[0], "], got ",
               ctx.input_concrete_shape(2).str());
  ctx.set_output(0, ctx.input_dtype(0), cache);
}

void tensor_scatter_kernel(KernelContext& ctx) {
  const Tensor& cache = ctx.input(0);
  const Tensor& update = ctx.input(1);
  Tensor& out = ctx.output(0);
  const int64_t rank = static_cast<int64_t>(cache.rank());
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -2), rank);
  const bool circular = ctx.attr_string("mode", "linear") == "circular";
  copy_elements(cache, 0, out, 0, cache.numel());
  int64_t rows = 1, inner = 1;  // rows: every axis before `axis`; inner: every axis after
  for (int64_t i = 0; i < axis; ++i) rows *= cache.shape()[i];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= cache.shape()[i];
  const int64_t max_len = cache.shape()[axis], len = update.shape()[axis];
  const int64_t per_batch = rows / cache.shape()[0];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / per_batch;
    const int64_t start = ctx.has_input(2) ? ctx.input(2).get_as_int64(b) : 0;
    for (int64_t s = 0; s < len; ++s) {
      int64_t at = start + s;
      if (circular) at = ((at % max_len) + max_len) % max_len;
      ONYX_CHECK(at >= 0 && at < max_len, "write_indices[", b, "] = ", start, " puts position ", s, " at ", at,
                 ", outside the cache's ", max_len, " (mode linear)");
      copy_elements(update, (r * len + s) * inner, out, (r * max_len + at) * inner, inner);
    }
  }
}

void register_gather_scatter_ops(OpRegistry& r) {
  r.add(onnx_op("TensorScatter", 24, infer_tensor_scatter, tensor_scatter_kernel));
  r.add(onnx_op("Gather", 1, infer_gather, gather_kernel));
  r.add(onnx_op("GatherElements", 11, infer_gather_elements, gather_elements_kernel));
  r.add(onnx_op("GatherND", 11, infer_gather_nd, gather_nd_kernel));
  r.add(onnx_op("ScatterElements", 11, infer_scatter_elements, scatter_elements_kernel));
  // Scatter (opsets 9-10) is ScatterElements under its old name, without reductions.
  r.add(onnx_op("Scatter", 9, infer_scatter_elements, scatter_elements_kernel));
  r.add(onnx_op("ScatterND", 11, infer_scatter_nd, scatter_nd_kernel));
  r.add(onnx_op("Compress", 9, infer_compress, compress_kernel).reads_values({1}));
  r.add(onnx_op(
      "NonZero", 9,
      [](InferContext& ctx) {
        const PartialShape& in = ctx.input_shape(0);
        PartialShape out = PartialShape::of_rank(2);  // [rank, count]; the count depends on the data
        if (in.rank_known) out.dims[0] = std::max<int64_t>(static_cast<int64_t>(in.dims.size()), 1);
        ctx.set_output(0, DType::kInt64, out);
      },
      nonzero_kernel)
            .reads_values({0}));
}

}  // namespace onyx
