// Matrix products and neural-network layers: MatMul, Gemm, Softmax, normalizations.
#include <cmath>

#include "backends/cpu/gemm.h"
#include "ops/common.h"

namespace onyx {

namespace {

// numpy.matmul shape rules: 1-D operands are promoted and the added axis dropped.
void infer_matmul(InferContext& ctx) {
  check_same_dtypes(ctx);
  const PartialShape& a = ctx.input_shape(0);
  const PartialShape& b = ctx.input_shape(1);
  if (!a.rank_known || !b.rank_known) {
    ctx.set_output(0, ctx.input_dtype(0), PartialShape());
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
  ctx.set_output(0, ctx.input_dtype(0), out);
}

template <class T>
void matmul_kernel(KernelContext& ctx) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  std::vector<int64_t> ad = a.shape().dims(), bd = b.shape().dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  Shape batch_a(std::vector<int64_t>(ad.begin(), ad.end() - 2));
  Shape batch_b(std::vector<int64_t>(bd.begin(), bd.end() - 2));
  Shape batch = broadcast_shapes(batch_a, batch_b);
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  // Flat offsets of each batch entry in a and b, honouring broadcast.
  std::vector<int64_t> off_a, off_b;
  Shape ba = batch_a, bb = batch_b;
  int64_t nbatch = batch.numel();
  off_a.reserve(nbatch);
  off_b.reserve(nbatch);
  std::vector<int64_t> idx(batch.rank(), 0);
  for (int64_t t = 0; t < nbatch; ++t) {
    int64_t oa = 0, ob = 0, sa = 1, sb = 1;
    for (size_t i = batch.rank(); i-- > 0;) {
      size_t ia = i - (batch.rank() - ba.rank()), ib = i - (batch.rank() - bb.rank());
      if (i >= batch.rank() - ba.rank()) {
        if (ba[ia] != 1) oa += idx[i] * sa;
        sa *= ba[ia];
      }
      if (i >= batch.rank() - bb.rank()) {
        if (bb[ib] != 1) ob += idx[i] * sb;
        sb *= bb[ib];
      }
    }
    off_a.push_back(oa * m * k);
    off_b.push_back(ob * k * n);
    for (size_t i = batch.rank(); i-- > 0;) {
      if (++idx[i] < batch[i]) break;
      idx[i] = 0;
    }
  }
  for (int64_t t = 0; t < nbatch; ++t) {
    T* c = po + t * m * n;
    if constexpr (std::is_same_v<T, float>)
      cpu::gemm_f32(false, false, m, n, k, 1.f, pa + off_a[t], std::max<int64_t>(k, 1), pb + off_b[t],
                    std::max<int64_t>(n, 1), 0.f, c, std::max<int64_t>(n, 1));
    else if constexpr (std::is_same_v<T, double>)
      cpu::gemm_f64(false, false, m, n, k, 1.0, pa + off_a[t], std::max<int64_t>(k, 1), pb + off_b[t],
                    std::max<int64_t>(n, 1), 0.0, c, std::max<int64_t>(n, 1));
    else
      cpu::gemm_reference<T, compute_t<T>>(false, false, m, n, k, 1, pa + off_a[t], k, pb + off_b[t], n, 0, c, n);
  }
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  r.add(OpDef{"", "MatMul", 1, infer_matmul, [](KernelContext& ctx) {
                dispatch<NumericTypes>(ctx.input(0).dtype(), "MatMul", [&](auto tag) {
                  matmul_kernel<typename decltype(tag)::type>(ctx);
                });
              }});
}

}  // namespace onyx
