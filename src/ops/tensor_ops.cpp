// Ops that view or make tensors: Reshape, Flatten, Squeeze, Unsqueeze, Identity,
// Shape, Size, Constant, ConstantOfShape, Range, EyeLike, OneHot.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/tensor_util.h"

namespace onyx {

namespace {

constexpr int64_t kUnknown = PartialShape::kUnknown;

// ---- views ----------------------------------------------------------------

void infer_reshape(InferContext& ctx) {
  auto maybe_target = known_ints(ctx, 1);
  if (!maybe_target) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  std::vector<int64_t> target = *maybe_target;
  bool allowzero = ctx.attr_int("allowzero", 0) != 0;
  const PartialShape& ps = ctx.input_shape(0);
  if (!ps.fully_known()) {
    // Without the input's shape only entries that need nothing from it are known.
    PartialShape out = PartialShape::of_rank(target.size());
    for (size_t i = 0; i < target.size(); ++i) {
      if (target[i] > 0 || (target[i] == 0 && allowzero))
        out.dims[i] = target[i];
      else if (target[i] == 0 && ps.rank_known && i < ps.dims.size())
        out.dims[i] = ps.dims[i];
    }
    ctx.set_output(0, ctx.input_dtype(0), out);
    return;
  }
  Shape in = ps.to_shape();
  std::vector<int64_t> known_dims;
  int infer_axis = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowzero) {
      ONYX_CHECK(i < in.rank(), "shape entry ", i, " is 0 (copy), but the input has rank ", in.rank());
      target[i] = in[i];
    }
    if (target[i] == -1) {
      ONYX_CHECK(infer_axis < 0, "more than one -1 in the target shape");
      infer_axis = static_cast<int>(i);
    } else {
      ONYX_CHECK(target[i] >= 0, "invalid target dimension ", target[i]);
      known_dims.push_back(target[i]);
    }
  }
  const int64_t known = checked_product(known_dims, "Reshape: the target shape's element count");
  if (infer_axis >= 0) {
    ONYX_CHECK(known != 0 && in.numel() % known == 0, "cannot reshape ", in.str(), " (", in.numel(),
               " elements) with a -1 into a multiple of ", known);
    target[infer_axis] = in.numel() / known;
  }
  Shape out(target);
  ONYX_CHECK(out.numel() == in.numel(), "cannot reshape ", in.str(), " into ", out.str());
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// Product of dims [b, e), unknown when any is unknown.
int64_t partial_product(const std::vector<int64_t>& dims, size_t b, size_t e) {
  int64_t p = 1;
  for (size_t i = b; i < e; ++i) {
    if (dims[i] == kUnknown) return kUnknown;
    p = checked_mul(p, dims[i], "the product of dimensions");
  }
  return p;
}

void infer_flatten(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(2));
    return;
  }
  const int64_t r = static_cast<int64_t>(in.dims.size());
  int64_t axis = ctx.attr_int("axis", 1);
  ONYX_CHECK(axis >= -r && axis <= r, "Flatten axis ", axis, " is out of range for rank ", r);
  if (axis < 0) axis += r;
  PartialShape out = PartialShape::of_rank(2);
  out.dims[0] = partial_product(in.dims, 0, axis);
  out.dims[1] = partial_product(in.dims, axis, r);
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// Squeeze/Unsqueeze axes: an attribute before opset 13, an (optional for Squeeze) input after.
std::optional<std::vector<int64_t>> view_axes(const InferContext& ctx, bool& present) {
  if (ctx.opset() < 13) {
    present = ctx.has_attr("axes");
    return ctx.attr_ints("axes");
  }
  present = ctx.has_input(1);
  if (!present) return std::vector<int64_t>{};
  return known_ints(ctx, 1);
}

void infer_squeeze(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  bool present = false;
  auto axes = view_axes(ctx, present);
  if (!axes || !in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  const int64_t r = static_cast<int64_t>(in.dims.size());
  std::vector<bool> drop(r, false);
  if (present) {
    for (int64_t a : *axes) {
      int64_t n = normalize_axis(a, r);
      ONYX_CHECK(!drop[n], "Squeeze axis ", a, " is given twice");
      ONYX_CHECK(in.dims[n] == 1 || in.dims[n] == kUnknown, "cannot squeeze axis ", a, " of size ", in.dims[n],
                 " (shape ", in.str(), ")");
      drop[n] = true;
    }
  } else {
    for (int64_t i = 0; i < r; ++i) {
      if (in.dims[i] == kUnknown) {  // whether it goes depends on its size
        ctx.set_output(0, ctx.input_dtype(0), PartialShape());
        return;
      }
      drop[i] = in.dims[i] == 1;
    }
  }
  PartialShape out = PartialShape::of_rank(0);
  for (int64_t i = 0; i < r; ++i)
    if (!drop[i]) out.dims.push_back(in.dims[i]);
  ctx.set_output(0, ctx.input_dtype(0), out);
}

void infer_unsqueeze(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  bool present = false;
  auto axes = view_axes(ctx, present);
  ONYX_CHECK(present, "Unsqueeze needs axes");
  if (!axes || !in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  const int64_t r = static_cast<int64_t>(in.dims.size() + axes->size());
  std::vector<bool> added(r, false);
  for (int64_t a : *axes) {
    int64_t n = normalize_axis(a, r);
    ONYX_CHECK(!added[n], "Unsqueeze axis ", a, " is given twice");
    added[n] = true;
  }
  PartialShape out = PartialShape::of_rank(r);
  size_t src = 0;
  for (int64_t i = 0; i < r; ++i) out.dims[i] = added[i] ? 1 : in.dims[src++];
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// ---- Shape, Size ----------------------------------------------------------

// [start, end) of the dims Shape reports (opset 15 start/end, clamped like slicing).
std::pair<int64_t, int64_t> shape_range(const NodeView& n, int64_t r) {
  auto clamp = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
  int64_t start = clamp(n.attr_int("start", 0));
  int64_t end = clamp(n.attr_int("end", r));
  return {start, std::max(start, end)};
}

void infer_shape(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, DType::kInt64, PartialShape::of_rank(1));
    return;
  }
  auto [s, e] = shape_range(ctx, static_cast<int64_t>(in.dims.size()));
  ctx.set_output(0, DType::kInt64, Shape{e - s});
}

void shape_kernel(KernelContext& ctx) {
  const Shape& in = ctx.input(0).shape();
  auto [s, e] = shape_range(ctx, static_cast<int64_t>(in.rank()));
  int64_t* out = ctx.output(0).data<int64_t>();
  for (int64_t i = s; i < e; ++i) out[i - s] = in[i];
}

// ---- Constant, ConstantOfShape --------------------------------------------

// The tensor a Constant node holds, from whichever value* attribute it has.
Tensor constant_value(const NodeView& n) {
  const char* kinds[] = {"value",      "value_float",  "value_floats",  "value_int",
                         "value_ints", "value_string", "value_strings", "sparse_value"};
  int found = 0;
  for (const char* k : kinds) found += n.has_attr(k);
  ONYX_CHECK(found == 1, "Constant needs exactly one value attribute, got ", found);
  if (const Tensor* t = n.attr_tensor("value")) return *t;
  ONYX_CHECK(!n.has_attr("sparse_value"), "Constant: sparse_value is not supported");
  if (n.has_attr("value_float")) return Tensor::scalar<float>(n.attr_float("value_float", 0));
  if (n.has_attr("value_int")) return Tensor::scalar<int64_t>(n.attr_int("value_int"));
  if (n.has_attr("value_string")) return Tensor::scalar<std::string>(n.attr_string("value_string", ""));
  if (n.has_attr("value_floats")) {
    auto v = n.attr_floats("value_floats");
    return Tensor::from_vector<float>(v, Shape{static_cast<int64_t>(v.size())});
  }
  if (n.has_attr("value_ints")) {
    auto v = n.attr_ints("value_ints");
    return Tensor::from_vector<int64_t>(v, Shape{static_cast<int64_t>(v.size())});
  }
  auto v = n.attr_strings("value_strings");
  return Tensor::from_vector<std::string>(v, Shape{static_cast<int64_t>(v.size())});
}

void infer_constant(InferContext& ctx) {
  Tensor t = constant_value(ctx);
  ctx.set_output(0, t.dtype(), t.shape());
}

void constant_kernel(KernelContext& ctx) {
  Tensor t = constant_value(ctx);
  copy_elements(t, 0, ctx.output(0), 0, t.numel());
}

// ConstantOfShape's fill value: a one-element tensor attribute, float 0 by default.
Tensor fill_value(const NodeView& n) {
  if (const Tensor* t = n.attr_tensor("value")) {
    ONYX_CHECK(t->numel() == 1, "ConstantOfShape value must have one element, got ", t->shape().str());
    return *t;
  }
  return Tensor::scalar<float>(0.f);
}

void infer_constant_of_shape(InferContext& ctx) {
  DType dt = fill_value(ctx).dtype();
  auto dims = known_ints(ctx, 0);
  if (!dims) {
    const PartialShape& s = ctx.input_shape(0);
    ctx.set_output(0, dt, s.fully_known() && s.dims.size() == 1 ? PartialShape::of_rank(s.dims[0]) : PartialShape());
    return;
  }
  for (int64_t d : *dims) ONYX_CHECK(d >= 0, "ConstantOfShape: negative dimension ", d);
  ctx.set_output(0, dt, Shape(*dims));
}

void constant_of_shape_kernel(KernelContext& ctx) {
  Tensor v = fill_value(ctx);
  Tensor& out = ctx.output(0);
  dispatch_storage(v.dtype(), "ConstantOfShape", [&](auto tag) {
    using U = typename decltype(tag)::type;
    std::fill_n(out.data<U>(), out.numel(), v.data<U>()[0]);
  });
}

// ---- Range ----------------------------------------------------------------

const Tensor& scalar_input(const Tensor& t, const char* what) {
  ONYX_CHECK(t.numel() == 1, "Range: ", what, " must be a scalar, got shape ", t.shape().str());
  return t;
}

// Number of elements: max(ceil((limit - start) / delta), 0).
int64_t range_count(const Tensor& start, const Tensor& limit, const Tensor& delta) {
  if (dtype_is_integer(start.dtype())) {
    int64_t s = start.get_as_int64(0), l = limit.get_as_int64(0), d = delta.get_as_int64(0);
    ONYX_CHECK(d != 0, "Range: delta must not be 0");
    // Exact integer ceil division, in 128 bits so extreme limits cannot overflow.
    __int128 span = static_cast<__int128>(l) - s;
    __int128 n = span / d + ((span % d != 0 && ((span > 0) == (d > 0))) ? 1 : 0);
    return n > 0 ? static_cast<int64_t>(n) : 0;
  }
  double s = start.get_as_double(0), l = limit.get_as_double(0), d = delta.get_as_double(0);
  ONYX_CHECK(d != 0, "Range: delta must not be 0");
  double n = std::ceil((l - s) / d);
  ONYX_CHECK(std::isfinite(n) && n < 1e12, "Range: start ", s, ", limit ", l, ", delta ", d,
             " give no finite element count");
  return n > 0 ? static_cast<int64_t>(n) : 0;
}

void infer_range(InferContext& ctx) {
  check_same_dtypes(ctx);
  const Tensor* s = ctx.input_value(0);
  const Tensor* l = ctx.input_value(1);
  const Tensor* d = ctx.input_value(2);
  if (!s || !l || !d) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(1));
    return;
  }
  int64_t n = range_count(scalar_input(*s, "start"), scalar_input(*l, "limit"), scalar_input(*d, "delta"));
  ctx.set_output(0, ctx.input_dtype(0), Shape{n});
}

void range_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  dispatch<NumericTypes>(out.dtype(), "Range", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    const int64_t n = out.numel();
    if constexpr (std::is_integral_v<T>) {
      int64_t s = ctx.input(0).get_as_int64(0), d = ctx.input(2).get_as_int64(0);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(s + i * d);
    } else {
      // start + i * delta (not a running sum, which accumulates rounding error).
      double s = ctx.input(0).get_as_double(0), d = ctx.input(2).get_as_double(0);
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<compute_t<T>>(s + static_cast<double>(i) * d));
    }
  });
}

// ---- EyeLike, OneHot ------------------------------------------------------

DType eyelike_dtype(const NodeView& n, DType input) {
  return n.has_attr("dtype") ? dtype_from_onnx(static_cast<int32_t>(n.attr_int("dtype"))) : input;
}

void infer_eyelike(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  ONYX_CHECK(!in.rank_known || in.dims.size() == 2, "EyeLike needs a 2-D input, got ", in.str());
  ctx.set_output(0, eyelike_dtype(ctx, ctx.input_dtype(0)), in.rank_known ? in : PartialShape::of_rank(2));
}

void eyelike_kernel(KernelContext& ctx) {
  Tensor& out = ctx.output(0);
  const int64_t rows = out.shape()[0], cols = out.shape()[1], k = ctx.attr_int("k", 0);
  dispatch<NumericBoolTypes>(out.dtype(), "EyeLike", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = out.data<T>();
    std::fill_n(p, out.numel(), static_cast<T>(0.0f));
    for (int64_t i = 0; i < rows; ++i) {
      int64_t j = i + k;
      if (j >= 0 && j < cols) p[i * cols + j] = static_cast<T>(1.0f);
    }
  });
}

// OneHot output: the indices' shape with `depth` inserted at `axis`.
int64_t onehot_axis(const NodeView& n, size_t indices_rank) {
  return normalize_axis(n.attr_int("axis", -1), static_cast<int64_t>(indices_rank) + 1);
}

int64_t onehot_depth(const Tensor& t) {
  ONYX_CHECK(t.numel() == 1, "OneHot: depth must have one element, got shape ", t.shape().str());
  int64_t d = t.get_as_int64(0);
  ONYX_CHECK(d > 0, "OneHot: depth must be positive, got ", d);
  return d;
}

void infer_onehot(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  const PartialShape& vals = ctx.input_shape(2);
  ONYX_CHECK(!vals.fully_known() || vals.to_shape().numel() == 2, "OneHot: values must hold [off, on], got shape ",
             vals.str());
  DType dt = ctx.input_dtype(2);
  if (!in.rank_known) {
    ctx.set_output(0, dt, PartialShape());
    return;
  }
  PartialShape out = in;
  int64_t axis = onehot_axis(ctx, in.dims.size());
  const Tensor* depth = ctx.input_value(1);
  out.dims.insert(out.dims.begin() + axis, depth ? onehot_depth(*depth) : kUnknown);
  ctx.set_output(0, dt, out);
}

void onehot_kernel(KernelContext& ctx) {
  const Tensor& indices = ctx.input(0);
  const Tensor& values = ctx.input(2);
  Tensor& out = ctx.output(0);
  const int64_t depth = onehot_depth(ctx.input(1));
  const int64_t axis = onehot_axis(ctx, indices.rank());
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < indices.rank(); ++i) (static_cast<int64_t>(i) < axis ? outer : inner) *= indices.shape()[i];
  dispatch_storage(out.dtype(), "OneHot", [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* v = values.data<U>();
    U* p = out.data<U>();
    std::fill_n(p, out.numel(), v[0]);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t idx = indices.get_as_int64(o * inner + i);
        if (idx < 0) idx += depth;
        // Per the spec, indices outside [-depth, depth) give an all-off row.
        if (idx >= 0 && idx < depth) p[(o * depth + idx) * inner + i] = v[1];
      }
  });
}

}  // namespace

void register_tensor_ops(OpRegistry& r) {
  r.add(onnx_op("Reshape", 5, infer_reshape).view(0, 0).reads_values({1}));
  r.add(onnx_op("Flatten", 1, infer_flatten).view(0, 0));
  r.add(onnx_op("Squeeze", 1, infer_squeeze).view(0, 0).reads_values({1}));
  r.add(onnx_op("Unsqueeze", 1, infer_unsqueeze).view(0, 0).reads_values({1}));
  r.add(onnx_op("Identity", 1, [](InferContext& ctx) { infer_same_as_input(ctx); }).view(0, 0));
  r.add(onnx_op("Shape", 1, infer_shape, shape_kernel).reads_only_metadata());
  r.add(onnx_op(
      "Size", 1, [](InferContext& ctx) { ctx.set_output(0, DType::kInt64, Shape{}); },
      [](KernelContext& ctx) { ctx.output(0).data<int64_t>()[0] = ctx.input(0).numel(); })
            .reads_only_metadata());
  r.add(onnx_op("Constant", 1, infer_constant, constant_kernel));
  r.add(onnx_op("ConstantOfShape", 9, infer_constant_of_shape, constant_of_shape_kernel).reads_values({0}));
  r.add(onnx_op("Range", 11, infer_range, range_kernel).reads_values({0, 1, 2}));
  r.add(onnx_op("EyeLike", 9, infer_eyelike, eyelike_kernel));
  r.add(onnx_op("OneHot", 9, infer_onehot, onehot_kernel).reads_values({1}));
}

}  // namespace onyx
