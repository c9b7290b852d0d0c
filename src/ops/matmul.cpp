// Matrix products: MatMul (numpy rules, BLAS for float32/float64) and Gemm.
#include <algorithm>

#include "cpu/gemm.h"
#include "cpu/thread_pool.h"
#include "ops/broadcast.h"
#include "ops/common.h"
#include "ops/gemm.h"
#include "ops/matmul_plan.h"

namespace onyx {

void infer_matmul_shape(InferContext& ctx, DType dt, size_t ia, size_t ib) {
  const PartialShape& a = ctx.input_shape(ia);
  const PartialShape& b = ctx.input_shape(ib);
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

namespace {

void infer_matmul(InferContext& ctx) {
  check_same_dtypes(ctx);
  infer_matmul_shape(ctx, ctx.input_dtype(0));
}

}  // namespace

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

namespace {

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
  if constexpr (std::is_same_v<T, float>) {
    // Batched products (attention's per-head matrices) split over the pool by batch entry
    // when there are enough of them, one contiguous run of entries per thread (in chunks of one
    // or two entries, taken as threads came free, vit-base's 12 heads of 197 x 64 by 64 x 197
    // and back took 0.56-0.60 ms at 2 threads, 0.45-0.48 so); each product splits its own
    // columns otherwise.
    const int64_t batch = static_cast<int64_t>(p.off_a.size());
    const bool by_entry = batch >= 2 * cpu::parallelism();
    auto one = [&](int64_t t) {
      cpu::gemm(false, false, m, n, k, pa + p.off_a[t], lda, pb + p.off_b[t], ldb, po + t * m * n, ldb);
    };
    if (by_entry) cpu::parallel_for(batch, batch / cpu::parallelism(), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) one(t);
      });
    else
      for (int64_t t = 0; t < batch; ++t) one(t);
    return;
  }
  for (size_t t = 0; t < p.off_a.size(); ++t) {
    T* c = po + static_cast<int64_t>(t) * m * n;
    if constexpr (std::is_same_v<T, double>)
      cpu::gemm_blas(false, false, m, n, k, T(1), pa + p.off_a[t], lda, pb + p.off_b[t], ldb, T(0), c, ldb);
    else
      cpu::gemm_reference<T, compute_t<T>>(false, false, m, n, k, 1, pa + p.off_a[t], k, pb + p.off_b[t], n, 0, c, n);
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
    if constexpr (std::is_same_v<T, float>) {
      if (alpha == 1.f) {
        cpu::Epilogue ep;
        ep.accumulate = has_c;
        cpu::gemm(ta, tb, m, n, k, pa, lda, pb, ldb, po, std::max<int64_t>(n, 1), ep);
        return;
      }
    }
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

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  r.add(onnx_op("MatMul", 1, infer_matmul, [](KernelContext& ctx) {
                dispatch<NumericTypes>(ctx.input(0).dtype(), "MatMul", [&](auto tag) {
                  matmul_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
  r.add(onnx_op("Gemm", 1, infer_gemm, [](KernelContext& ctx) {
                dispatch<GemmTypes>(ctx.input(0).dtype(), "Gemm", [&](auto tag) {
                  gemm_kernel<typename decltype(tag)::type>(ctx);
                });
              }));
}

}  // namespace onyx
