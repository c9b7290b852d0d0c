// Matrix products and neural-network layers: MatMul, Gemm, Softmax, normalizations.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "ops/gemm.h"
#include "ops/broadcast.h"
#include "ops/common.h"

namespace onyx {

namespace {

// numpy.matmul shape rules: 1-D operands are promoted and the added axis dropped.
// Output dtype `dt`; MatMulInteger reuses the shape rules with an int32 output.
void infer_matmul_shape(InferContext& ctx, DType dt) {
  const PartialShape& a = ctx.input_shape(0);
  const PartialShape& b = ctx.input_shape(1);
  if (!a.rank_known || !b.rank_known) {
    ctx.set_output(0, dt, PartialShape());
    return;
  }
  ONYX_CHECK(!a.dims.empty() && !b.dims.empty(), "MatMul needs inputs of rank >= 1, got ", a.str(), " and ", b.str());
  PartialShape a2 = a, b2 = b;
  if (a2.dims.size() == 1) a2.dims.insert(a2.dims.begin(), 1);
  if (b2.dims.size() == 1) b2.dims.push_back(1);
  int64_t ka = a2.dims.back(), kb = b2.dims[b2.dims.size() - 2];
  ONYX_CHECK(ka < 0 || kb < 0 || ka == kb, "inner dimensions differ: ", a.str(), " x ", b.str());
  PartialShape batch_a, batch_b;
  batch_a.rank_known = batch_b.rank_known = true;
  batch_a.dims.assign(a2.dims.begin(), a2.dims.end() - 2);
  batch_b.dims.assign(b2.dims.begin(), b2.dims.end() - 2);
  PartialShape out = broadcast_shapes(batch_a, batch_b);
  if (a.dims.size() > 1) out.dims.push_back(a2.dims[a2.dims.size() - 2]);
  if (b.dims.size() > 1) out.dims.push_back(b2.dims.back());
  ctx.set_output(0, dt, out);
}

void infer_matmul(InferContext& ctx) {
  check_same_dtypes(ctx);
  infer_matmul_shape(ctx, ctx.input_dtype(0));
}


// The batch layout of a numpy-style matmul: per broadcast batch entry, the
// element offsets of its A and B matrices.
struct MatmulPlan {
  int64_t m = 0, k = 0, n = 0;
  std::vector<int64_t> off_a, off_b;
};

MatmulPlan plan_matmul(const Shape& a, const Shape& b) {
  ONYX_CHECK(a.rank() >= 1 && b.rank() >= 1, "MatMul needs inputs of rank >= 1, got ", a.str(), " and ", b.str());
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  MatmulPlan p;
  p.m = ad[ad.size() - 2];
  p.k = ad.back();
  p.n = bd.back();
  ONYX_CHECK(p.k == bd[bd.size() - 2], "inner dimensions differ: ", a.str(), " x ", b.str());
  Shape ba(std::vector<int64_t>(ad.begin(), ad.end() - 2));
  Shape bb(std::vector<int64_t>(bd.begin(), bd.end() - 2));
  Shape batch = broadcast_shapes(ba, bb);
  const int64_t nbatch = batch.numel();
  p.off_a.reserve(nbatch);
  p.off_b.reserve(nbatch);
  const size_t r = batch.rank();
  std::vector<int64_t> idx(r, 0);
  for (int64_t t = 0; t < nbatch; ++t) {
    int64_t oa = 0, ob = 0, sa = 1, sb = 1;
    for (size_t i = r; i-- > 0;) {
      if (i >= r - ba.rank()) {
        int64_t d = ba[i - (r - ba.rank())];
        if (d != 1) oa += idx[i] * sa;
        sa *= d;
      }
      if (i >= r - bb.rank()) {
        int64_t d = bb[i - (r - bb.rank())];
        if (d != 1) ob += idx[i] * sb;
        sb *= d;
      }
    }
    p.off_a.push_back(oa * p.m * p.k);
    p.off_b.push_back(ob * p.k * p.n);
    for (size_t i = r; i-- > 0;) {
      if (++idx[i] < batch[i]) break;
      idx[i] = 0;
    }
  }
  return p;
}

template <class T>
void matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  MatmulPlan p = plan_matmul(a.shape(), b.shape());
  const int64_t m = p.m, k = p.k, n = p.n;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const int64_t lda = std::max<int64_t>(k, 1), ldb = std::max<int64_t>(n, 1);
  for (size_t t = 0; t < p.off_a.size(); ++t) {
    T* c = po + static_cast<int64_t>(t) * m * n;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      cpu::gemm_blas(false, false, m, n, k, T(1), pa + p.off_a[t], lda, pb + p.off_b[t], ldb, T(0), c, ldb);
    else
      cpu::gemm_reference<T, compute_t<T>>(false, false, m, n, k, 1, pa + p.off_a[t], k, pb + p.off_b[t], n, 0, c, n);
  }
}

// ---- MatMulInteger ----

void infer_matmul_integer(InferContext& ctx) {
  for (size_t i : {0, 1}) {
    DType d = ctx.input_dtype(i);
    ONYX_CHECK(d == DType::kInt8 || d == DType::kUInt8, "input ", i, " must be int8 or uint8, got ", dtype_name(d));
  }
  infer_matmul_shape(ctx, DType::kInt32);
}

// Per-row (A) or per-column (B) zero points: a scalar or a 1-D tensor of `count`.
std::vector<int32_t> zero_points(const KernelContext& ctx, size_t i, DType data_dtype, int64_t count,
                                 const char* what) {
  std::vector<int32_t> z(static_cast<size_t>(count), 0);
  if (!ctx.has_input(i)) return z;
  const Tensor& t = ctx.input(i);
  ONYX_CHECK(t.dtype() == data_dtype, what, " zero point has dtype ", dtype_name(t.dtype()), ", but the data has ",
             dtype_name(data_dtype));
  if (t.numel() == 1) {
    std::fill(z.begin(), z.end(), static_cast<int32_t>(t.get_as_int64(0)));
    return z;
  }
  ONYX_CHECK(t.rank() == 1 && t.numel() == count, what, " zero point must be a scalar or hold ", count,
             " values, got shape ", t.shape().str());
  for (int64_t j = 0; j < count; ++j) z[j] = static_cast<int32_t>(t.get_as_int64(j));
  return z;
}

void matmul_integer_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  MatmulPlan p = plan_matmul(a.shape(), b.shape());
  std::vector<int32_t> za = zero_points(ctx, 2, a.dtype(), p.m, "A");
  std::vector<int32_t> zb = zero_points(ctx, 3, b.dtype(), p.n, "B");
  int32_t* po = ctx.output(0).data<int32_t>();
  auto get = [](const Tensor& t) {
    return [&t](int64_t i) -> int32_t {
      return t.dtype() == DType::kInt8 ? t.data<int8_t>()[i] : t.data<uint8_t>()[i];
    };
  };
  auto ga = get(a), gb = get(b);
  for (size_t t = 0; t < p.off_a.size(); ++t) {
    int32_t* c = po + static_cast<int64_t>(t) * p.m * p.n;
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        int32_t acc = 0;
        for (int64_t q = 0; q < p.k; ++q)
          acc += (ga(p.off_a[t] + i * p.k + q) - za[i]) * (gb(p.off_b[t] + q * p.n + j) - zb[j]);
        c[i * p.n + j] = acc;
      }
  }
}

// ---- Gemm ----

void infer_gemm(InferContext& ctx) {
  check_same_dtypes(ctx);
  const PartialShape& a = ctx.input_shape(0);
  const PartialShape& b = ctx.input_shape(1);
  DType dt = ctx.input_dtype(0);
  if (!a.rank_known || !b.rank_known) {
    ctx.set_output(0, dt, PartialShape::of_rank(2));
    return;
  }
  ONYX_CHECK(a.dims.size() == 2 && b.dims.size() == 2, "Gemm needs 2-D A and B, got ", a.str(), " and ", b.str());
  bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  int64_t m = a.dims[ta ? 1 : 0], ka = a.dims[ta ? 0 : 1];
  int64_t kb = b.dims[tb ? 1 : 0], n = b.dims[tb ? 0 : 1];
  ONYX_CHECK(ka < 0 || kb < 0 || ka == kb, "Gemm inner dimensions differ: A ", a.str(), (ta ? " (transposed)" : ""),
             ", B ", b.str(), (tb ? " (transposed)" : ""));
  PartialShape out = PartialShape::of_rank(2);
  out.dims = {m, n};
  ctx.set_output(0, dt, out);
}

template <class T>
void gemm_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  float alpha = ctx.attr_float("alpha", 1.f), beta = ctx.attr_float("beta", 1.f);
  const int64_t m = out.shape()[0], n = out.shape()[1], k = a.shape()[ta ? 0 : 1];
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  const bool has_c = ctx.has_input(2) && beta != 0.f;
  const T* pc = nullptr;
  Shape cshape;
  if (ctx.has_input(2)) {
    const Tensor& c = ctx.input(2);
    cshape = c.shape();
    ONYX_CHECK(cshape.rank() <= 2, "C must have rank <= 2, got ", cshape.str());
    for (size_t i = 0; i < cshape.rank(); ++i) {
      int64_t want = out.shape()[2 - cshape.rank() + i];
      ONYX_CHECK(cshape[i] == 1 || cshape[i] == want, "C of shape ", cshape.str(),
                 " does not broadcast to the output shape ", out.shape().str());
    }
    pc = c.data<T>();
  }
  const int64_t lda = std::max<int64_t>(a.shape()[1], 1), ldb = std::max<int64_t>(b.shape()[1], 1);
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    // out = beta * C (broadcast), then BLAS adds alpha * A * B into it.
    if (has_c)
      for_each_broadcast<1>(out.shape(), {&cshape}, [&](int64_t o, const std::array<int64_t, 1>& i) {
        po[o] = static_cast<T>(beta) * pc[i[0]];
      });
    if (m * n == 0) return;
    T cbeta = has_c ? T(1) : T(0);
    cpu::gemm_blas(ta, tb, m, n, k, static_cast<T>(alpha), pa, lda, pb, ldb, cbeta, po, std::max<int64_t>(n, 1));
  } else {
    // Integers and 16-bit floats: accumulate in double, round once.
    std::vector<double> acc(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) {
          double av = static_cast<double>(static_cast<compute_t<T>>(ta ? pa[p * lda + i] : pa[i * lda + p]));
          double bv = static_cast<double>(static_cast<compute_t<T>>(tb ? pb[j * ldb + p] : pb[p * ldb + j]));
          s += av * bv;
        }
        acc[i * n + j] = alpha * s;
      }
    if (has_c)
      for_each_broadcast<1>(out.shape(), {&cshape}, [&](int64_t o, const std::array<int64_t, 1>& i) {
        acc[o] += beta * static_cast<double>(static_cast<compute_t<T>>(pc[i[0]]));
      });
    for (int64_t o = 0; o < m * n; ++o) po[o] = static_cast<T>(static_cast<compute_t<T>>(acc[o]));
  }
}

using GemmTypes = TypeList<float, double, Float16, BFloat16, int32_t, int64_t, uint32_t, uint64_t>;

// ---- Softmax, LogSoftmax, Hardmax ----

enum class SM { kSoftmax, kLogSoftmax, kHardmax };

template <class T>
void softmax_kernel(KernelContext& ctx, SM kind) {
  const Tensor& x = ctx.input(0);
  const int64_t rank = static_cast<int64_t>(x.rank());
  int64_t outer = 1, n = 1, inner = 1;
  if (ctx.opset() < 13) {
    // Before opset 13 the input is coerced to 2-D [prod(d[:axis]), prod(d[axis:])].
    int64_t axis = rank == 0 ? 0 : normalize_axis(ctx.attr_int("axis", 1), rank);
    for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : n) *= x.shape()[i];
  } else {
    ONYX_CHECK(rank >= 1, "input must have rank >= 1");
    int64_t axis = normalize_axis(ctx.attr_int("axis", -1), rank);
    for (int64_t i = 0; i < rank; ++i) (i < axis ? outer : i == axis ? n : inner) *= x.shape()[i];
  }
  const T* px = x.data<T>();
  T* po = ctx.output(0).data<T>();
  using C = compute_t<T>;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t in = 0; in < inner; ++in) {
      const int64_t base = o * n * inner + in;
      auto at = [&](int64_t j) { return base + j * inner; };
      C mx = -std::numeric_limits<C>::infinity();
      int64_t arg = 0;
      for (int64_t j = 0; j < n; ++j) {
        C v = static_cast<C>(px[at(j)]);
        if (v > mx) {
          mx = v;
          arg = j;
        }
      }
      if (kind == SM::kHardmax) {
        for (int64_t j = 0; j < n; ++j) po[at(j)] = static_cast<T>(C(j == arg ? 1 : 0));
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(static_cast<C>(px[at(j)])) - mx);
      if (kind == SM::kSoftmax) {
        for (int64_t j = 0; j < n; ++j)
          po[at(j)] = static_cast<T>(static_cast<C>(std::exp(static_cast<double>(static_cast<C>(px[at(j)])) - mx) / sum));
      } else {
        double ls = std::log(sum);
        for (int64_t j = 0; j < n; ++j)
          po[at(j)] = static_cast<T>(static_cast<C>(static_cast<double>(static_cast<C>(px[at(j)])) - mx - ls));
      }
    }
}

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

void register_nn_ops(OpRegistry& r) {
  r.add(onnx_op("MatMul", 1, infer_matmul, [](KernelContext& ctx) {
                dispatch<NumericTypes>(ctx.input(0).dtype(), "MatMul", [&](auto tag) {
                  matmul_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
  r.add(onnx_op("MatMulInteger", 10, infer_matmul_integer, matmul_integer_kernel));
  r.add(onnx_op("Gemm", 1, infer_gemm, [](KernelContext& ctx) {
                dispatch<GemmTypes>(ctx.input(0).dtype(), "Gemm", [&](auto tag) {
                  gemm_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
  const std::pair<const char*, SM> softmaxes[] = {
      {"Softmax", SM::kSoftmax}, {"LogSoftmax", SM::kLogSoftmax}, {"Hardmax", SM::kHardmax}};
  for (auto [name, kind] : softmaxes) {
    OpDef def = onnx_op(name, 1, [](InferContext& ctx) { infer_same_as_input(ctx); },
                        [name, kind](KernelContext& ctx) {
                          dispatch<FloatTypes>(ctx.input(0).dtype(), name, [&](auto tag) {
                            softmax_kernel<typename decltype(tag)::type>(ctx, kind);
                          });
                        });
    if (kind != SM::kHardmax) def.in_place({0});  // each row is read whole before it is written
    r.add(std::move(def));
  }
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
