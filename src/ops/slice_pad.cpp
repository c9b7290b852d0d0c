// Windowing ops: Slice, Pad, CenterCropPad.
#include <algorithm>
#include <limits>

#include "ops/tensor_util.h"

namespace onyx {

namespace {

// ---- Slice ----------------------------------------------------------------

// Slice's arguments as given (attributes before opset 10, inputs after); nullopt when unknown.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

// get(i) yields input i's values (or nullopt when they are unknown / the input is absent).
template <class Get>
std::optional<SliceArgs> slice_args(const NodeView& n, Get get) {
  SliceArgs a;
  if (n.opset() < 10) {
    a.starts = n.attr_ints("starts");
    a.ends = n.attr_ints("ends");
    a.axes = n.attr_ints("axes");
  } else {
    auto s = get(1), e = get(2);
    if (!s || !e) return std::nullopt;
    a.starts = *s;
    a.ends = *e;
    if (n.has_input(3)) {
      auto ax = get(3);
      if (!ax) return std::nullopt;
      a.axes = *ax;
    }
    if (n.has_input(4)) {
      auto st = get(4);
      if (!st) return std::nullopt;
      a.steps = *st;
    }
  }
  ONYX_CHECK(a.starts.size() == a.ends.size(), "Slice: ", a.starts.size(), " starts but ", a.ends.size(), " ends");
  if (a.axes.empty()) {
    a.axes.resize(a.starts.size());
    for (size_t i = 0; i < a.axes.size(); ++i) a.axes[i] = static_cast<int64_t>(i);
  }
  if (a.steps.empty()) a.steps.assign(a.starts.size(), 1);
  ONYX_CHECK(a.axes.size() == a.starts.size(), "Slice: ", a.axes.size(), " axes for ", a.starts.size(), " starts");
  ONYX_CHECK(a.steps.size() == a.starts.size(), "Slice: ", a.steps.size(), " steps for ", a.starts.size(), " starts");
  return a;
}

// Per input axis: first index, step and element count.
struct SliceWindow {
  std::vector<int64_t> start, step, count;
};

// Clamps per the spec: with a positive step starts/ends land in [0, dim]; with a
// negative one starts land in [0, dim-1] and ends in [-1, dim-1].
SliceWindow slice_window(const SliceArgs& a, std::span<const int64_t> dims) {
  const int64_t r = static_cast<int64_t>(dims.size());
  SliceWindow w{std::vector<int64_t>(r, 0), std::vector<int64_t>(r, 1), std::vector<int64_t>(dims.begin(), dims.end())};
  std::vector<bool> seen(r, false);
  for (size_t i = 0; i < a.axes.size(); ++i) {
    const int64_t axis = normalize_axis(a.axes[i], r);
    ONYX_CHECK(!seen[axis], "Slice: axis ", a.axes[i], " is given twice");
    seen[axis] = true;
    const int64_t dim = dims[axis], step = a.steps[i];
    ONYX_CHECK(step != 0, "Slice: step for axis ", axis, " is 0");
    // dim >= 0, so adding it to a negative value cannot overflow.
    int64_t s = a.starts[i] < 0 ? a.starts[i] + dim : a.starts[i];
    int64_t e = a.ends[i] < 0 ? a.ends[i] + dim : a.ends[i];
    int64_t n = 0;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      n = e > s ? 1 + (e - s - 1) / step : 0;
    } else if (dim > 0) {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      // Negating INT64_MIN overflows; INT64_MAX gives the same count, as s - e <= dim.
      const int64_t neg = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
      n = s > e ? 1 + (s - e - 1) / neg : 0;
    } else {
      s = 0;
    }
    w.start[axis] = s;
    w.step[axis] = step;
    w.count[axis] = n;
  }
  return w;
}

void infer_slice(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  auto args = slice_args(ctx, [&](size_t i) { return known_ints(ctx, i); });
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  if (!args || !in.fully_known()) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(in.dims.size()));
    return;
  }
  ctx.set_output(0, ctx.input_dtype(0), Shape(slice_window(*args, in.dims).count));
}

void slice_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  auto args = slice_args(ctx, [&](size_t i) -> std::optional<std::vector<int64_t>> {
    const Tensor& t = ctx.input(i);
    check_index_dtype(t.dtype(), "Slice starts/ends/axes/steps");
    return t.to_int64_vector();
  });
  SliceWindow w = slice_window(*args, in.shape().dims());
  auto st = in.shape().strides();
  int64_t base = 0;
  std::vector<int64_t> strides(st.size());
  for (size_t i = 0; i < st.size(); ++i) {
    base += w.start[i] * st[i];
    strides[i] = w.step[i] * st[i];
  }
  strided_copy(in, base, w.count, strides, ctx.output(0), "Slice");
}

// ---- Pad, CenterCropPad ---------------------------------------------------

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

PadMode pad_mode(const NodeView& n) {
  std::string m = n.attr_string("mode", "constant");
  if (m == "constant") return PadMode::kConstant;
  if (m == "reflect") return PadMode::kReflect;
  if (m == "edge") return PadMode::kEdge;
  if (m == "wrap") return PadMode::kWrap;
  throw Error(cat("Pad: unknown mode '", m, "' (expected constant, reflect, edge or wrap)"));
}

// Per input axis (begin, end) padding, negative meaning crop. `get` as for Slice.
template <class Get>
std::optional<std::vector<int64_t>> pad_amounts(const NodeView& n, size_t rank, Get get) {
  std::vector<int64_t> raw;
  std::vector<int64_t> axes;
  if (n.opset() < 11) {
    raw = n.attr_ints(n.opset() < 2 ? "paddings" : "pads");
  } else {
    auto p = get(1);
    if (!p) return std::nullopt;
    raw = *p;
    if (n.opset() >= 18 && n.has_input(3)) {
      auto a = get(3);
      if (!a) return std::nullopt;
      axes = *a;
    }
  }
  if (axes.empty()) {
    axes.resize(rank);
    for (size_t i = 0; i < rank; ++i) axes[i] = static_cast<int64_t>(i);
  }
  ONYX_CHECK(raw.size() == 2 * axes.size(), "Pad: ", raw.size(), " pads for ", axes.size(),
             " axes (expected twice as many)");
  std::vector<int64_t> pads(2 * rank, 0);  // [begin_0, end_0, begin_1, end_1, ...]
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalize_axis(axes[i], static_cast<int64_t>(rank));
    ONYX_CHECK(!seen[a], "Pad: axis ", axes[i], " is given twice");
    seen[a] = true;
    pads[2 * a] = raw[i];
    pads[2 * a + 1] = raw[axes.size() + i];
  }
  return pads;
}

void infer_pad(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  auto pads = pad_amounts(ctx, in.dims.size(), [&](size_t i) { return known_ints(ctx, i); });
  if (!pads) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape::of_rank(in.dims.size()));
    return;
  }
  PartialShape out = in;
  for (size_t a = 0; a < in.dims.size(); ++a) {
    if (in.dims[a] == PartialShape::kUnknown) continue;
    out.dims[a] = checked_add(checked_add(in.dims[a], (*pads)[2 * a], "Pad: padded axis"), (*pads)[2 * a + 1],
                              "Pad: padded axis");
    ONYX_CHECK(out.dims[a] >= 0, "Pad: pads ", (*pads)[2 * a], ", ", (*pads)[2 * a + 1], " on axis ", a, " of size ",
               in.dims[a], " give a negative size");
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// Input coordinate an output coordinate reads, or -1 for the constant.
int64_t pad_source(int64_t c, int64_t dim, PadMode mode) {
  if (c >= 0 && c < dim) return c;
  switch (mode) {
    case PadMode::kConstant:
      return -1;
    case PadMode::kEdge:
      return c < 0 ? 0 : dim - 1;
    case PadMode::kWrap:
      return ((c % dim) + dim) % dim;
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      const int64_t period = 2 * (dim - 1);
      int64_t m = ((c % period) + period) % period;
      return m < dim ? m : period - m;
    }
  }
  return -1;
}

// out = in padded by `begins` on each axis (output shape already set), reading
// padding per `mode`; `fill` is a one-element tensor of the dtype for constants.
void pad_core(const Tensor& in, Tensor& out, const std::vector<int64_t>& begins, PadMode mode, const Tensor& fill,
              std::string_view what) {
  const size_t r = in.rank();
  const auto& od = out.shape().dims();
  if (out.numel() == 0) return;
  // Per axis, the source coordinate of each output coordinate.
  std::vector<std::vector<int64_t>> src(r);
  for (size_t a = 0; a < r; ++a) {
    const int64_t dim = in.shape()[a];
    ONYX_CHECK(mode == PadMode::kConstant || dim > 0 || od[a] == 0, what, ": cannot pad the empty axis ", a,
               " in a non-constant mode");
    src[a].resize(od[a]);
    for (int64_t o = 0; o < od[a]; ++o) src[a][o] = pad_source(o - begins[a], dim, mode);
  }
  const auto st = in.shape().strides();
  dispatch_storage(in.dtype(), what, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* p = in.data<U>();
    U* q = out.data<U>();
    const U c = fill.data<U>()[0];
    if (r == 0) {
      q[0] = p[0];
      return;
    }
    const int64_t inner = od[r - 1];
    const std::vector<int64_t>& last = src[r - 1];
    std::vector<int64_t> counter(r, 0);
    for (int64_t o = 0; o < out.numel(); o += inner) {
      // The row is all constant when any outer coordinate falls in the padding.
      int64_t base = 0;
      bool pad_row = false;
      for (size_t a = 0; a + 1 < r; ++a) {
        int64_t s = src[a][counter[a]];
        if (s < 0) pad_row = true;
        base += s * st[a];
      }
      for (int64_t j = 0; j < inner; ++j) q[o + j] = (pad_row || last[j] < 0) ? c : p[base + last[j]];
      for (size_t a = r - 1; a-- > 0;) {
        if (++counter[a] < od[a]) break;
        counter[a] = 0;
      }
    }
  });
}

// A one-element tensor of `dt` holding `v` (zero / empty string when v is 0).
Tensor fill_scalar(DType dt, double v) {
  Tensor t(dt, Shape{});
  if (dt == DType::kString) return t;  // strings pad with ""
  dispatch<NumericBoolTypes>(dt, "Pad", [&](auto tag) {
    using T = typename decltype(tag)::type;
    t.data<T>()[0] = static_cast<T>(static_cast<compute_t<T>>(v));
  });
  return t;
}

void pad_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  auto pads = pad_amounts(ctx, in.rank(), [&](size_t i) -> std::optional<std::vector<int64_t>> {
    check_index_dtype(ctx.input(i).dtype(), "Pad pads/axes");
    return ctx.input(i).to_int64_vector();
  });
  std::vector<int64_t> begins(in.rank());
  for (size_t a = 0; a < in.rank(); ++a) begins[a] = (*pads)[2 * a];
  Tensor fill;
  if (ctx.opset() >= 11 && ctx.has_input(2) && ctx.input(2).numel() > 0) {
    fill = ctx.input(2);
    ONYX_CHECK(fill.dtype() == in.dtype(), "Pad: constant_value is ", dtype_name(fill.dtype()), ", data is ",
               dtype_name(in.dtype()));
  } else {
    fill = fill_scalar(in.dtype(), ctx.opset() < 11 ? ctx.attr_float("value", 0.f) : 0.0);
  }
  pad_core(in, ctx.output(0), begins, pad_mode(ctx), fill, "Pad");
}

// CenterCropPad as padding amounts: crop or pad each listed axis around its centre.
std::vector<int64_t> center_pads(const NodeView& n, std::span<const int64_t> dims,
                                 const std::vector<int64_t>& target) {
  const int64_t r = static_cast<int64_t>(dims.size());
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (!n.has_attr("axes")) {
    axes.resize(r);
    for (int64_t i = 0; i < r; ++i) axes[i] = i;
  }
  ONYX_CHECK(target.size() == axes.size(), "CenterCropPad: shape has ", target.size(), " entries for ", axes.size(),
             " axes");
  std::vector<int64_t> pads(2 * r, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = normalize_axis(axes[i], r);
    ONYX_CHECK(target[i] >= 0, "CenterCropPad: negative target size ", target[i]);
    // Odd differences put the extra element at the end, for crop and pad alike.
    int64_t diff = target[i] - dims[a];
    int64_t begin = diff >= 0 ? diff / 2 : -((-diff) / 2);
    pads[2 * a] = begin;
    pads[2 * a + 1] = diff - begin;
  }
  return pads;
}

void infer_center_crop_pad(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  auto target = known_ints(ctx, 1);
  if (!target || !in.fully_known()) {
    ctx.set_output(0, ctx.input_dtype(0), in.rank_known ? PartialShape::of_rank(in.dims.size()) : PartialShape());
    return;
  }
  auto pads = center_pads(ctx, in.dims, *target);
  std::vector<int64_t> out(in.dims.size());
  for (size_t a = 0; a < out.size(); ++a) out[a] = in.dims[a] + pads[2 * a] + pads[2 * a + 1];
  ctx.set_output(0, ctx.input_dtype(0), Shape(out));
}

void center_crop_pad_kernel(KernelContext& ctx) {
  const Tensor& in = ctx.input(0);
  auto pads = center_pads(ctx, in.shape().dims(), ctx.input(1).to_int64_vector());
  std::vector<int64_t> begins(in.rank());
  for (size_t a = 0; a < in.rank(); ++a) begins[a] = pads[2 * a];
  pad_core(in, ctx.output(0), begins, PadMode::kConstant, fill_scalar(in.dtype(), 0), "CenterCropPad");
}

}  // namespace

void register_slice_pad_ops(OpRegistry& r) {
  r.add(onnx_op("Slice", 1, infer_slice, slice_kernel).reads_values({1, 2, 3, 4}));
  r.add(onnx_op(
      "Pad", 1,
      [](InferContext& ctx) {
        pad_mode(ctx);  // reject unknown modes early
        infer_pad(ctx);
      },
      pad_kernel)
            .reads_values({1, 2, 3}));
  r.add(onnx_op("CenterCropPad", 18, infer_center_crop_pad, center_crop_pad_kernel).reads_values({1}));
}

}  // namespace onyx
