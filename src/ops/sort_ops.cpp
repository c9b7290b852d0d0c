// TopK and Unique: the ops that sort (NaN ordered after every number).
#include <algorithm>
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

// Strict orders that treat NaN as larger than every number, so sorting stays well defined.
template <class C>
bool nan_aware_less(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
  }
  return a < b;
}

int64_t topk_k(const NodeView& n, const Tensor* k_input) {
  if (n.opset() < 10) return n.attr_int("k");
  ONYX_CHECK(k_input, "TopK: K must be known");
  ONYX_CHECK(k_input->numel() == 1, "TopK: K must hold one value, got shape ", k_input->shape().str());
  return k_input->get_as_int64(0);
}

void infer_topk(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  const Tensor* kt = ctx.opset() >= 10 ? ctx.input_value(1) : nullptr;
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    ctx.set_output(1, DType::kInt64, PartialShape());
    return;
  }
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -1), static_cast<int64_t>(in.dims.size()));
  PartialShape out = in;
  if (ctx.opset() < 10 || kt) {
    const int64_t k = topk_k(ctx, kt);
    ONYX_CHECK(k >= 0 && (in.dims[axis] == PartialShape::kUnknown || k <= in.dims[axis]), "TopK: k = ", k,
               " is outside [0, ", in.dims[axis], "] for axis ", axis);
    out.dims[axis] = k;
  } else {
    out.dims[axis] = PartialShape::kUnknown;
  }
  ctx.set_output(0, ctx.input_dtype(0), out);
  if (ctx.num_outputs() > 1) ctx.set_output(1, DType::kInt64, out);
}

void topk_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const auto& d = x.shape().dims();
  const int64_t axis = normalize_axis(ctx.attr_int("axis", -1), static_cast<int64_t>(d.size()));
  const int64_t k = topk_k(ctx, ctx.opset() >= 10 ? &ctx.input(1) : nullptr);
  const bool largest = ctx.attr_int("largest", 1) != 0;
  const int64_t outer = product(d, 0, axis), dim = d[axis], inner = product(d, axis + 1, d.size());
  Tensor& values = ctx.output(0);
  int64_t* indices = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : nullptr;
  dispatch<NumericTypes>(x.dtype(), "TopK", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* p = x.data<T>();
    T* q = values.data<T>();
    std::vector<C> line(dim);
    std::vector<int64_t> order(dim);
    // Ties go to the lower index; the result is always sorted (allowed when sorted=0).
    auto before = [&](int64_t a, int64_t b) {
      if (largest ? nan_aware_less(line[b], line[a]) : nan_aware_less(line[a], line[b])) return true;
      if (largest ? nan_aware_less(line[a], line[b]) : nan_aware_less(line[b], line[a])) return false;
      return a < b;
    };
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t base = o * dim * inner + i;
        for (int64_t j = 0; j < dim; ++j) line[j] = static_cast<C>(p[base + j * inner]);
        std::iota(order.begin(), order.end(), 0);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
        const int64_t obase = o * k * inner + i;
        for (int64_t j = 0; j < k; ++j) {
          q[obase + j * inner] = p[base + order[j] * inner];
          if (indices) indices[obase + j * inner] = order[j];
        }
      }
  });
}

void infer_unique(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  PartialShape y = PartialShape::of_rank(1);
  if (ctx.has_attr("axis")) {
    if (!in.rank_known) {
      y = PartialShape();
    } else {
      y = in;
      y.dims[normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(in.dims.size()))] = PartialShape::kUnknown;
    }
  }
  // Every output's length depends on the data: the kernel allocates them.
  ctx.set_output(0, ctx.input_dtype(0), y);
  for (size_t o = 1; o < ctx.num_outputs() && o < 4; ++o) ctx.set_output(o, DType::kInt64, PartialShape::of_rank(1));
}

void unique_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  // Unique over slices x[..., s, ...] along the axis; without one, over single elements.
  int64_t outer = 1, n = x.numel(), inner = 1, axis = -1;
  if (ctx.has_attr("axis")) {
    const auto& d = x.shape().dims();
    axis = normalize_axis(ctx.attr_int("axis"), static_cast<int64_t>(d.size()));
    outer = product(d, 0, axis);
    n = d[axis];
    inner = product(d, axis + 1, d.size());
  }
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> group_of(n);  // sorted group number of each slice
  std::vector<int64_t> firsts;       // per sorted group, its first slice
  dispatch<AllTypes>(x.dtype(), "Unique", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = x.data<T>();
    auto less = [&](int64_t a, int64_t b) {  // lexicographic over the slice's elements
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          const T& u = p[(o * n + a) * inner + i];
          const T& v = p[(o * n + b) * inner + i];
          if constexpr (std::is_same_v<T, std::string>) {
            if (u != v) return u < v;
          } else {
            using C = compute_t<T>;
            if (nan_aware_less<C>(u, v)) return true;
            if (nan_aware_less<C>(v, u)) return false;
          }
        }
      return false;
    };
    // Stable: the first member of each run of equals is its first occurrence.
    std::stable_sort(order.begin(), order.end(), less);
    for (int64_t j = 0; j < n; ++j) {
      if (j == 0 || less(order[j - 1], order[j])) firsts.push_back(order[j]);
      group_of[order[j]] = static_cast<int64_t>(firsts.size()) - 1;
    }
  });
  const int64_t u = static_cast<int64_t>(firsts.size());
  // Output position of each sorted group: sorted order, or order of first occurrence.
  std::vector<int64_t> pos(u);
  std::iota(pos.begin(), pos.end(), 0);
  if (ctx.attr_int("sorted", 1) == 0) {
    std::vector<int64_t> by_first(u);
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) { return firsts[a] < firsts[b]; });
    for (int64_t i = 0; i < u; ++i) pos[by_first[i]] = i;
  }
  Shape yshape = axis < 0 ? Shape{u} : x.shape();
  if (axis >= 0) yshape[axis] = u;
  Tensor& y = ctx.allocate_output(0, x.dtype(), yshape);
  for (int64_t g = 0; g < u; ++g)
    for (int64_t o = 0; o < outer; ++o)
      copy_elements(x, (o * n + firsts[g]) * inner, y, (o * u + pos[g]) * inner, inner);
  if (ctx.has_output(1)) {
    int64_t* q = ctx.allocate_output(1, DType::kInt64, Shape{u}).data<int64_t>();
    for (int64_t g = 0; g < u; ++g) q[pos[g]] = firsts[g];
  }
  if (ctx.has_output(2)) {
    int64_t* q = ctx.allocate_output(2, DType::kInt64, Shape{n}).data<int64_t>();
    for (int64_t j = 0; j < n; ++j) q[j] = pos[group_of[j]];
  }
  if (ctx.has_output(3)) {
    int64_t* q = ctx.allocate_output(3, DType::kInt64, Shape{u}).data<int64_t>();
    std::fill_n(q, u, 0);
    for (int64_t j = 0; j < n; ++j) ++q[pos[group_of[j]]];
  }
}

}  // namespace

void register_sort_ops(OpRegistry& r) {
  r.add(onnx_op("TopK", 1, infer_topk, topk_kernel).reads_values({1}));
  r.add(onnx_op("Unique", 11, infer_unique, unique_kernel).reads_values({0}));
}

}  // namespace onyx
