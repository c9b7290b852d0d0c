// Reductions over axes (ReduceSum, ReduceMean, ReduceMax, ...), ArgMax/ArgMin,
// and the running reductions CumSum/CumProd.
#include <cmath>
#include <limits>

#include "ops/common.h"

namespace onyx {

namespace {

enum class RK { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kLogSum, kLogSumExp, kSumSquare };

// Accumulation type: double for floats (so float32 sums lose nothing), the
// widest integer of the same signedness for integers.
template <class T>
using acc_t = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double,
                                 std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>, uint64_t,
                                                    int64_t>>;

// The opset from which `axes` is an input rather than an attribute.
int axes_input_opset(const std::string& name) { return name == "ReduceSum" ? 13 : 18; }

struct ReduceSpec {
  bool noop = false;           // noop_with_empty_axes with no axes: output = input
  std::vector<bool> reduced;   // per input axis
  bool known = true;           // axes known (false while planning without values)
};

ReduceSpec reduce_spec(const NodeView& node, const std::string& name, size_t rank, const Tensor* axes_value,
                       bool axes_input_present) {
  ReduceSpec s;
  std::vector<int64_t> axes;
  if (node.opset() >= axes_input_opset(name)) {
    if (axes_input_present) {
      if (!axes_value) {
        s.known = false;
        return s;
      }
      ONYX_CHECK(axes_value->dtype() == DType::kInt64 || axes_value->dtype() == DType::kInt32,
                 "axes must be int64, got ", dtype_name(axes_value->dtype()));
      ONYX_CHECK(axes_value->rank() <= 1, "axes must be 1-D, got shape ", axes_value->shape().str());
      axes = axes_value->to_int64_vector();
    }
    if (axes.empty() && node.attr_int("noop_with_empty_axes", 0) != 0) {
      s.noop = true;
      return s;
    }
  } else {
    axes = node.attr_ints("axes");
  }
  s.reduced.assign(rank, axes.empty());
  for (int64_t a : axes) {
    int64_t n = normalize_axis(a, static_cast<int64_t>(rank));
    ONYX_CHECK(!s.reduced[n] || axes.empty(), "axis ", a, " is listed twice in axes");
    s.reduced[n] = true;
  }
  return s;
}

void infer_reduce(InferContext& ctx, const std::string& name) {
  const PartialShape& in = ctx.input_shape(0);
  DType dt = ctx.input_dtype(0);
  bool keep = ctx.attr_int("keepdims", 1) != 0;
  if (!in.rank_known) {
    ctx.set_output(0, dt, PartialShape());
    return;
  }
  bool has_axes = ctx.opset() >= axes_input_opset(name) && ctx.has_input(1);
  ReduceSpec s = reduce_spec(ctx, name, in.dims.size(), has_axes ? ctx.input_value(1) : nullptr, has_axes);
  if (!s.known) {
    ctx.set_output(0, dt, keep ? PartialShape::of_rank(in.dims.size()) : PartialShape());
    return;
  }
  if (s.noop) {
    ctx.set_output(0, dt, in);
    return;
  }
  PartialShape out;
  out.rank_known = true;
  for (size_t i = 0; i < in.dims.size(); ++i) {
    if (!s.reduced[i]) out.dims.push_back(in.dims[i]);
    else if (keep) out.dims.push_back(1);
  }
  ctx.set_output(0, dt, out);
}

// Calls fn(in_flat, out_flat) for every input element, where out_flat is the
// element's position in the reduced output (reduced axes collapsed).
template <class Fn>
void walk_reduce(const Shape& in, const std::vector<bool>& reduced, Fn&& fn) {
  const size_t r = in.rank();
  const int64_t total = in.numel();
  if (total == 0) return;
  std::vector<int64_t> ostride(r, 0);
  int64_t acc = 1;
  for (size_t i = r; i-- > 0;) {
    if (!reduced[i]) {
      ostride[i] = acc;
      acc *= in[i];
    }
  }
  if (r == 0) {
    fn(0, 0);
    return;
  }
  std::vector<int64_t> idx(r, 0);
  int64_t o = 0;
  const int64_t inner = in[r - 1], istride = ostride[r - 1];
  for (int64_t base = 0; base < total; base += inner) {
    for (int64_t j = 0; j < inner; ++j) fn(base + j, o + j * istride);
    for (size_t i = r - 1; i-- > 0;) {
      o += ostride[i];
      if (++idx[i] < in[i]) break;
      o -= ostride[i] * idx[i];
      idx[i] = 0;
    }
  }
}

template <class T>
void reduce_kernel(KernelContext& ctx, RK kind, const std::string& name) {
  const Tensor& x = ctx.input(0);
  bool has_axes = ctx.opset() >= axes_input_opset(name) && ctx.has_input(1);
  ReduceSpec s = reduce_spec(ctx, name, x.rank(), has_axes ? &ctx.input(1) : nullptr, has_axes);
  Tensor& out = ctx.output(0);
  const T* px = x.data<T>();
  T* po = out.data<T>();
  if (s.noop) {
    std::copy(px, px + x.numel(), po);
    return;
  }
  using A = acc_t<T>;
  const int64_t n_out = out.numel();
  const int64_t count = n_out == 0 ? 0 : x.numel() / n_out;
  std::vector<A> acc(n_out);
  A init = 0;
  if (kind == RK::kProd) init = 1;
  if (kind == RK::kMax)
    init = std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                : static_cast<A>(std::numeric_limits<T>::lowest());
  if (kind == RK::kMin)
    init = std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                : static_cast<A>(std::numeric_limits<T>::max());
  if constexpr (std::is_same_v<T, bool>) {
    if (kind == RK::kMax) init = 0;
    if (kind == RK::kMin) init = 1;
  }
  std::fill(acc.begin(), acc.end(), init);
  auto val = [&](int64_t i) { return static_cast<A>(static_cast<compute_t<T>>(px[i])); };
  switch (kind) {
    case RK::kSum:
    case RK::kMean:
    case RK::kLogSum:
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) { acc[o] += val(i); });
      break;
    case RK::kProd:
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) { acc[o] *= val(i); });
      break;
    case RK::kMax:
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) {
        A v = val(i);
        if (v > acc[o] || v != v) acc[o] = v;  // v != v: NaN propagates
      });
      break;
    case RK::kMin:
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) {
        A v = val(i);
        if (v < acc[o] || v != v) acc[o] = v;
      });
      break;
    case RK::kL1:
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) {
        A v = val(i);
        if constexpr (std::is_signed_v<A>) acc[o] += v < 0 ? -v : v;
        else acc[o] += v;
      });
      break;
    case RK::kL2:
    case RK::kSumSquare:
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) {
        A v = val(i);
        acc[o] += v * v;
      });
      break;
    case RK::kLogSumExp: {
      // Subtract the running maximum so that exp cannot overflow.
      std::vector<double> mx(n_out, -std::numeric_limits<double>::infinity());
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) {
        double v = static_cast<double>(val(i));
        if (v > mx[o]) mx[o] = v;
      });
      std::vector<double> sum(n_out, 0.0);
      walk_reduce(x.shape(), s.reduced, [&](int64_t i, int64_t o) {
        double m = std::isinf(mx[o]) ? 0.0 : mx[o];
        sum[o] += std::exp(static_cast<double>(val(i)) - m);
      });
      for (int64_t o = 0; o < n_out; ++o) {
        double m = std::isinf(mx[o]) ? 0.0 : mx[o];
        po[o] = static_cast<T>(static_cast<compute_t<T>>(std::log(sum[o]) + m));
      }
      return;
    }
  }
  for (int64_t o = 0; o < n_out; ++o) {
    A a = acc[o];
    compute_t<T> r;
    if (kind == RK::kMean) {
      if constexpr (std::is_floating_point_v<A>) r = static_cast<compute_t<T>>(a / static_cast<A>(count));
      else r = count == 0 ? compute_t<T>(0) : static_cast<compute_t<T>>(a / static_cast<A>(count));
    } else if (kind == RK::kL2) {
      r = static_cast<compute_t<T>>(std::sqrt(static_cast<double>(a)));
    } else if (kind == RK::kLogSum) {
      r = static_cast<compute_t<T>>(std::log(static_cast<double>(a)));
    } else {
      r = static_cast<compute_t<T>>(a);
    }
    po[o] = static_cast<T>(r);
  }
}

using ReduceTypes = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                             uint32_t, uint64_t>;
using ReduceBoolTypes = TypeList<float, double, Float16, BFloat16, int8_t, int16_t, int32_t, int64_t, uint8_t,
                                 uint16_t, uint32_t, uint64_t, bool>;

void add_reduce(OpRegistry& r, const std::string& name, RK kind) {
  r.add(onnx_op(name, 1, [name](InferContext& ctx) { infer_reduce(ctx, name); },
              [name, kind](KernelContext& ctx) {
                auto body = [&](auto tag) { reduce_kernel<typename decltype(tag)::type>(ctx, kind, name); };
                if (kind == RK::kMax || kind == RK::kMin) dispatch<ReduceBoolTypes>(ctx.input(0).dtype(), name, body);
                else dispatch<ReduceTypes>(ctx.input(0).dtype(), name, body);
              })
            .reads_values({1}));  // axes (an input from opset 13 for ReduceSum, 18 for the rest)
}

// ---- ArgMax / ArgMin ----

void infer_arg(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, DType::kInt64, PartialShape());
    return;
  }
  int64_t axis = normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(in.dims.size()));
  PartialShape out = in;
  if (ctx.attr_int("keepdims", 1) != 0) out.dims[axis] = 1;
  else out.dims.erase(out.dims.begin() + axis);
  ctx.set_output(0, DType::kInt64, out);
}

// outer x n x inner split of a shape around `axis`.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& s, int64_t axis) {
  AxisSplit a;
  for (int64_t i = 0; i < static_cast<int64_t>(s.rank()); ++i) {
    if (i < axis) a.outer *= s[i];
    else if (i == axis) a.n = s[i];
    else a.inner *= s[i];
  }
  return a;
}

template <class T>
void arg_kernel(KernelContext& ctx, bool is_max) {
  const Tensor& x = ctx.input(0);
  int64_t axis = normalize_axis(ctx.attr_int("axis", 0), static_cast<int64_t>(x.rank()));
  bool last = ctx.attr_int("select_last_index", 0) != 0;
  AxisSplit sp = split_at(x.shape(), axis);
  ONYX_CHECK(sp.n > 0 || sp.outer * sp.inner == 0, "cannot take ", is_max ? "ArgMax" : "ArgMin",
             " over axis ", axis, " of size 0 (shape ", x.shape().str(), ")");
  const T* px = x.data<T>();
  int64_t* po = ctx.output(0).data<int64_t>();
  using C = compute_t<T>;
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t in = 0; in < sp.inner; ++in) {
      const T* p = px + o * sp.n * sp.inner + in;
      C best = static_cast<C>(p[0]);
      int64_t bi = 0;
      for (int64_t k = 1; k < sp.n; ++k) {
        C v = static_cast<C>(p[k * sp.inner]);
        bool better = is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best);
        if (better) {
          best = v;
          bi = k;
        }
      }
      po[o * sp.inner + in] = bi;
    }
}

// ---- CumSum / CumProd ----

template <class T>
void cumulative_kernel(KernelContext& ctx, bool product) {
  const Tensor& x = ctx.input(0);
  const Tensor& ax = ctx.input(1);
  ONYX_CHECK(ax.numel() == 1 && (ax.dtype() == DType::kInt64 || ax.dtype() == DType::kInt32),
             "axis must be an int32/int64 scalar, got ", ax.type_str());
  ONYX_CHECK(x.rank() >= 1, "input must have rank >= 1");
  int64_t axis = normalize_axis(ax.get_as_int64(0), static_cast<int64_t>(x.rank()));
  bool exclusive = ctx.attr_int("exclusive", 0) != 0;
  bool reverse = ctx.attr_int("reverse", 0) != 0;
  AxisSplit sp = split_at(x.shape(), axis);
  const T* px = x.data<T>();
  T* po = ctx.output(0).data<T>();
  using A = acc_t<T>;
  for (int64_t o = 0; o < sp.outer; ++o)
    for (int64_t in = 0; in < sp.inner; ++in) {
      const int64_t base = o * sp.n * sp.inner + in;
      A acc = product ? 1 : 0;
      for (int64_t s = 0; s < sp.n; ++s) {
        int64_t k = reverse ? sp.n - 1 - s : s;
        A v = static_cast<A>(static_cast<compute_t<T>>(px[base + k * sp.inner]));
        if (exclusive) po[base + k * sp.inner] = static_cast<T>(static_cast<compute_t<T>>(acc));
        acc = product ? acc * v : acc + v;
        if (!exclusive) po[base + k * sp.inner] = static_cast<T>(static_cast<compute_t<T>>(acc));
      }
    }
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  add_reduce(r, "ReduceSum", RK::kSum);
  add_reduce(r, "ReduceMean", RK::kMean);
  add_reduce(r, "ReduceMax", RK::kMax);
  add_reduce(r, "ReduceMin", RK::kMin);
  add_reduce(r, "ReduceProd", RK::kProd);
  add_reduce(r, "ReduceL1", RK::kL1);
  add_reduce(r, "ReduceL2", RK::kL2);
  add_reduce(r, "ReduceLogSum", RK::kLogSum);
  add_reduce(r, "ReduceLogSumExp", RK::kLogSumExp);
  add_reduce(r, "ReduceSumSquare", RK::kSumSquare);

  for (bool is_max : {true, false}) {
    const char* name = is_max ? "ArgMax" : "ArgMin";
    r.add(onnx_op(name, 1, infer_arg, [is_max, name](KernelContext& ctx) {
                  dispatch<ReduceTypes>(ctx.input(0).dtype(), name, [&](auto tag) {
                    arg_kernel<typename decltype(tag)::type>(ctx, is_max);
                  });
                }));
  }
  for (bool product : {false, true}) {
    const char* name = product ? "CumProd" : "CumSum";
    r.add(onnx_op(name, 11, [](InferContext& ctx) { infer_same_as_input(ctx); },
                [product, name](KernelContext& ctx) {
                  dispatch<ReduceTypes>(ctx.input(0).dtype(), name, [&](auto tag) {
                    cumulative_kernel<typename decltype(tag)::type>(ctx, product);
                  });
                }));
  }
}

}  // namespace onyx
