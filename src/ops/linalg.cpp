// Linear algebra beyond products: Det (LU with partial pivoting) and Einsum.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>

#include "ops/common.h"
#include "ops/gemm.h"

namespace onyx {

namespace {
// ---- Det ----

template <class T>
void det_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t r = static_cast<int64_t>(x.rank());
  const int64_t m = x.shape()[r - 1];
  const T* px = x.data<T>();
  T* po = ctx.output(0).data<T>();
  const int64_t nmat = m == 0 ? ctx.output(0).numel() : x.numel() / (m * m);
  std::vector<double> a(static_cast<size_t>(m * m));
  for (int64_t t = 0; t < nmat; ++t) {
    for (int64_t i = 0; i < m * m; ++i) a[i] = static_cast<double>(static_cast<compute_t<T>>(px[t * m * m + i]));
    // LU with partial pivoting; the determinant is the signed product of pivots.
    double det = 1;
    for (int64_t c = 0; c < m && det != 0; ++c) {
      int64_t piv = c;
      for (int64_t i = c + 1; i < m; ++i)
        if (std::abs(a[i * m + c]) > std::abs(a[piv * m + c])) piv = i;
      if (a[piv * m + c] == 0) {
        det = 0;
        break;
      }
      if (piv != c) {
        for (int64_t j = 0; j < m; ++j) std::swap(a[c * m + j], a[piv * m + j]);
        det = -det;
      }
      det *= a[c * m + c];
      for (int64_t i = c + 1; i < m; ++i) {
        double f = a[i * m + c] / a[c * m + c];
        for (int64_t j = c; j < m; ++j) a[i * m + j] -= f * a[c * m + j];
      }
    }
    po[t] = static_cast<T>(static_cast<compute_t<T>>(det));
  }
}

void infer_det(InferContext& ctx) {
  const PartialShape& in = ctx.input_shape(0);
  if (!in.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
    return;
  }
  size_t r = in.dims.size();
  ONYX_CHECK(r >= 2, "Det needs rank >= 2, got ", in.str());
  int64_t a = in.dims[r - 2], b = in.dims[r - 1];
  ONYX_CHECK(a < 0 || b < 0 || a == b, "Det needs square matrices, got ", in.str());
  PartialShape out = in;
  out.dims.resize(r - 2);
  ctx.set_output(0, ctx.input_dtype(0), out);
}

// ---- Einsum ----

// Labels are character codes; the dimensions an ellipsis covers get labels
// kEllipsis + position (right-aligned across operands, as numpy broadcasts).
constexpr int kEllipsis = 256;

struct EinsumPlan {
  std::vector<std::vector<int>> in_labels;  // per operand, per axis
  std::vector<int> out_labels;
  std::map<int, int64_t> size;
  Shape out_shape;
};

EinsumPlan plan_einsum(const std::string& equation, const std::vector<Shape>& shapes) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  EinsumPlan p;
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  ONYX_CHECK(terms.size() == shapes.size(), "equation '", equation, "' has ", terms.size(), " operand terms, but ",
             shapes.size(), " inputs were given");
  // Splits a term into letters and the position of "..." (-1 if none).
  auto parse = [&](const std::string& term, std::vector<int>& letters, int& ell_pos) {
    ell_pos = -1;
    for (size_t i = 0; i < term.size();) {
      if (term.compare(i, 3, "...") == 0) {
        ONYX_CHECK(ell_pos < 0, "term '", term, "' of equation '", equation, "' has two ellipses");
        ell_pos = static_cast<int>(letters.size());
        i += 3;
        continue;
      }
      char c = term[i];
      ONYX_CHECK(std::isalpha(static_cast<unsigned char>(c)), "equation '", equation, "' has invalid character '", c,
                 "'");
      letters.push_back(static_cast<unsigned char>(c));
      ++i;
    }
  };
  int64_t ell_rank = 0;
  std::vector<std::vector<int>> letters(terms.size());
  std::vector<int> ell_pos(terms.size());
  for (size_t t = 0; t < terms.size(); ++t) {
    parse(terms[t], letters[t], ell_pos[t]);
    int64_t extra = static_cast<int64_t>(shapes[t].rank()) - static_cast<int64_t>(letters[t].size());
    ONYX_CHECK(extra == 0 || (extra > 0 && ell_pos[t] >= 0), "term '", terms[t], "' has ", letters[t].size(),
               " labels, but input ", t, " has shape ", shapes[t].str());
    ell_rank = std::max(ell_rank, extra);
  }
  std::map<int, int> count;
  for (size_t t = 0; t < terms.size(); ++t) {
    const int64_t extra = static_cast<int64_t>(shapes[t].rank()) - static_cast<int64_t>(letters[t].size());
    std::vector<int>& labels = p.in_labels.emplace_back();
    for (size_t i = 0; i < letters[t].size(); ++i) {
      if (static_cast<int>(i) == ell_pos[t])
        for (int64_t e = 0; e < extra; ++e) labels.push_back(kEllipsis + static_cast<int>(ell_rank - extra + e));
      labels.push_back(letters[t][i]);
    }
    if (ell_pos[t] == static_cast<int>(letters[t].size()))
      for (int64_t e = 0; e < extra; ++e) labels.push_back(kEllipsis + static_cast<int>(ell_rank - extra + e));
    std::set<int> seen;
    for (size_t i = 0; i < labels.size(); ++i) {
      int l = labels[i];
      int64_t d = shapes[t][i];
      auto it = p.size.find(l);
      if (it == p.size.end() || it->second == 1) {
        p.size[l] = d;
      } else {
        ONYX_CHECK(d == it->second || d == 1, "label '",
                   l >= kEllipsis ? std::string("...") : std::string(1, static_cast<char>(l)), "' has size ",
                   it->second, " and ", d, " in equation '", equation, "'");
      }
      if (l < kEllipsis && seen.insert(l).second) ++count[l];
    }
  }
  if (arrow != std::string::npos) {
    std::vector<int> out_letters;
    int out_ell;
    parse(eq.substr(arrow + 2), out_letters, out_ell);
    for (size_t i = 0; i <= out_letters.size(); ++i) {
      if (static_cast<int>(i) == out_ell)
        for (int64_t e = 0; e < ell_rank; ++e) p.out_labels.push_back(kEllipsis + static_cast<int>(e));
      if (i < out_letters.size()) {
        ONYX_CHECK(p.size.count(out_letters[i]), "output label '", static_cast<char>(out_letters[i]),
                   "' does not appear in the inputs of '", equation, "'");
        p.out_labels.push_back(out_letters[i]);
      }
    }
  } else {
    // Implicit output: the broadcast dimensions, then labels used once, in character order.
    for (int64_t e = 0; e < ell_rank; ++e) p.out_labels.push_back(kEllipsis + static_cast<int>(e));
    for (auto [l, c] : count)
      if (c == 1) {
        int occurrences = 0;
        for (auto& ls : p.in_labels) occurrences += static_cast<int>(std::count(ls.begin(), ls.end(), l));
        if (occurrences == 1) p.out_labels.push_back(l);
      }
  }
  for (int l : p.out_labels) p.out_shape.dims().push_back(p.size[l]);
  return p;
}

void infer_einsum(InferContext& ctx) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) {
    if (!ctx.input_shape(i).fully_known()) {
      ctx.set_output(0, ctx.input_dtype(0), PartialShape());
      return;
    }
    shapes.push_back(ctx.input_shape(i).to_shape());
  }
  check_same_dtypes(ctx);
  EinsumPlan p = plan_einsum(ctx.node().find_attribute("equation") ? ctx.attr_string("equation", "") : "", shapes);
  ctx.set_output(0, ctx.input_dtype(0), p.out_shape);
}

template <class T>
void einsum_kernel(KernelContext& ctx) {
  std::vector<Shape> shapes;
  for (size_t i = 0; i < ctx.num_inputs(); ++i) shapes.push_back(ctx.input(i).shape());
  EinsumPlan p = plan_einsum(ctx.attr_string("equation", ""), shapes);
  // Every label, output labels first; per label the stride in each operand and the output.
  std::vector<int> all = p.out_labels;
  for (auto& [l, s] : p.size)
    if (std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  const size_t nl = all.size(), nin = shapes.size();
  std::vector<int64_t> dims(nl);
  std::vector<std::vector<int64_t>> stride(nin + 1, std::vector<int64_t>(nl, 0));
  for (size_t j = 0; j < nl; ++j) dims[j] = p.size[all[j]];
  for (size_t t = 0; t < nin; ++t) {
    std::vector<int64_t> st = shapes[t].strides();
    for (size_t a = 0; a < p.in_labels[t].size(); ++a) {
      if (shapes[t][a] == 1 && p.size[p.in_labels[t][a]] != 1) continue;  // broadcast
      size_t j = std::find(all.begin(), all.end(), p.in_labels[t][a]) - all.begin();
      stride[t][j] += st[a];  // a repeated label walks the diagonal
    }
  }
  std::vector<int64_t> ost = p.out_shape.strides();
  for (size_t a = 0; a < p.out_labels.size(); ++a) stride[nin][a] = ost[a];
  using A = std::conditional_t<std::is_floating_point_v<compute_t<T>>, double, int64_t>;
  std::vector<A> acc(static_cast<size_t>(p.out_shape.numel()), A(0));
  std::vector<const T*> ptr(nin);
  for (size_t t = 0; t < nin; ++t) ptr[t] = ctx.input(t).data<T>();
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> idx(nl, 0), off(nin + 1, 0);
  for (int64_t it = 0; it < total; ++it) {
    A v = 1;
    for (size_t t = 0; t < nin; ++t) v *= static_cast<A>(static_cast<compute_t<T>>(ptr[t][off[t]]));
    acc[off[nin]] += v;
    for (size_t j = nl; j-- > 0;) {
      for (size_t t = 0; t <= nin; ++t) off[t] += stride[t][j];
      if (++idx[j] < dims[j]) break;
      for (size_t t = 0; t <= nin; ++t) off[t] -= stride[t][j] * dims[j];
      idx[j] = 0;
    }
  }
  T* po = ctx.output(0).data<T>();
  for (size_t o = 0; o < acc.size(); ++o) po[o] = static_cast<T>(static_cast<compute_t<T>>(acc[o]));
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  r.add(onnx_op("Det", 11, infer_det, [](KernelContext& ctx) {
                dispatch<FloatTypes>(ctx.input(0).dtype(), "Det", [&](auto tag) {
                  det_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
  r.add(onnx_op("Einsum", 12, infer_einsum, [](KernelContext& ctx) {
                dispatch<NumericTypes>(ctx.input(0).dtype(), "Einsum", [&](auto tag) {
                  einsum_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
}

}  // namespace onyx
