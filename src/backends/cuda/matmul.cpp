// MatMul and Gemm through cuBLASLt.
//
// cuBLASLt is column-major and onyx is row-major. A row-major [r, c] matrix is
// the column-major [c, r] matrix with the same bytes, so D = A·B is computed
// as D^T = B^T·A^T: our B goes into cuBLASLt's A slot and our A into its B
// slot, and D's column-major layout is [N, M]. Everything is enqueued on
// cu.stream with no allocation and no synchronization (CUDA-Graph capturable).
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/gemm.h"
#include "onyx/error.h"
#include "ops/conv_util.h"

namespace onyx::cuda {

namespace {

bool is_gemm_dtype(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kFloat16: return CUDA_R_16F;
    case DType::kBFloat16: return CUDA_R_16BF;
    default: throw Error(cat("cuBLASLt matmul does not handle ", dtype_name(d)));
  }
}

void check_lt(cublasStatus_t s, const char* what, const std::string& where) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw Error(cat("cuBLASLt ", what, " failed with ", cublasLtGetStatusName(s), " (", cublasLtGetStatusString(s),
                  ") for ", where));
}

// Owners of cuBLASLt descriptors (host objects only; creating them per call is cheap).
struct MatmulDesc {
  cublasLtMatmulDesc_t h = nullptr;
  ~MatmulDesc() {
    if (h) cublasLtMatmulDescDestroy(h);
  }
};
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  ~Layout() {
    if (h) cublasLtMatrixLayoutDestroy(h);
  }
};
struct Preference {
  cublasLtMatmulPreference_t h = nullptr;
  ~Preference() {
    if (h) cublasLtMatmulPreferenceDestroy(h);
  }
};

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing
// the address and, for batches, the byte stride between matrices.
uint32_t alignment_of(const void* p, int64_t stride_bytes) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | 256u;
  if (stride_bytes != 0) v |= static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(v & (~v + 1));
}

// Heuristic results per problem: the search costs far more than the matmul for
// small shapes, and a shape recurs on every run of a model.
using AlgoKey = std::array<int64_t, 21>;
std::mutex g_algo_mutex;
std::map<AlgoKey, cublasLtMatmulAlgo_t> g_algo_cache;

void set_attr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void* v, size_t size,
              const std::string& where) {
  check_lt(cublasLtMatmulDescSetAttribute(d, a, v, size), "cublasLtMatmulDescSetAttribute", where);
}

void make_layout(Layout& l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride,
                 const std::string& where) {
  check_lt(cublasLtMatrixLayoutCreate(&l.h, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
           "cublasLtMatrixLayoutCreate", where);
  if (batch > 1) {
    int32_t count = static_cast<int32_t>(batch);
    check_lt(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
             "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)", where);
    check_lt(cublasLtMatrixLayoutSetAttribute(l.h, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                              sizeof(stride)),
             "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)", where);
  }
}

}  // namespace

void run_gemm(const GemmCall& g, CudaContext& cu, const std::string& where) {
  ONYX_CHECK(cu.lt, "cuBLASLt handle missing for ", where);
  ONYX_CHECK(g.batch >= 1 && g.batch <= INT32_MAX, "batch count ", g.batch, " out of cuBLASLt's range for ", where);
  const cudaDataType_t t = cuda_type(g.dtype);
  auto handle = static_cast<cublasLtHandle_t>(cu.lt);

  // Exact float32: CUBLAS_COMPUTE_32F never uses TF32 (that is the _FAST_TF32 variant);
  // 16-bit inputs accumulate in float32 too, with float alpha/beta.
  MatmulDesc desc;
  check_lt(cublasLtMatmulDescCreate(&desc.h, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate", where);
  // Swapped operands: cuBLASLt's A is our B, its B is our A.
  const int32_t op_a = g.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = g.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_attr(desc.h, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a), where);
  set_attr(desc.h, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b), where);
  if (g.bias) {
    // The bias vector runs along D's column-major rows, which are our N columns.
    const uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
    set_attr(desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi), where);
    set_attr(desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias), where);
  }

  // Stored (pre-op) matrices in column-major terms.
  Layout la, lb, ld;
  make_layout(la, t, g.tb ? g.k : g.n, g.tb ? g.n : g.k, g.ldb, g.batch, g.stride_b, where);  // our B
  make_layout(lb, t, g.ta ? g.m : g.k, g.ta ? g.k : g.m, g.lda, g.batch, g.stride_a, where);  // our A
  make_layout(ld, t, g.n, g.m, g.ldd, g.batch, g.stride_d, where);
  const bool use_c = g.c && g.beta != 0.f;
  const void* cptr = use_c ? g.c : g.d;  // beta == 0: C is not read, so D stands in for it
  const float beta = use_c ? g.beta : 0.f;

  const int64_t esize = static_cast<int64_t>(dtype_size(g.dtype));
  const uint32_t al_a = alignment_of(g.b, g.batch > 1 ? g.stride_b * esize : 0);  // cuBLASLt's A = our B
  const uint32_t al_b = alignment_of(g.a, g.batch > 1 ? g.stride_a * esize : 0);
  const uint32_t al_d = alignment_of(g.d, g.batch > 1 ? g.stride_d * esize : 0);
  const uint32_t al_c = use_c ? alignment_of(cptr, 0) : al_d;

  AlgoKey key{cu.device,  static_cast<int64_t>(g.dtype), g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldd, g.batch,
              g.stride_a, g.stride_b, g.stride_d, use_c, g.bias != nullptr, al_a, al_b, al_c, al_d,
              static_cast<int64_t>(cu.workspace_bytes)};
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    auto it = g_algo_cache.find(key);
    if (it != g_algo_cache.end()) {
      algo = it->second;
      found = true;
    }
  }
  if (!found) {
    // 16-bit outputs: keep split-K partial sums in float32 (not in the output type,
    // nor added up in place in D) so results stay within a rounding of the CPU's.
    const bool narrow = g.dtype != DType::kFloat32;
    for (int attempt = 0; attempt < 2 && !found; ++attempt) {
      Preference pref;
      check_lt(cublasLtMatmulPreferenceCreate(&pref.h), "cublasLtMatmulPreferenceCreate", where);
      auto set_pref = [&](cublasLtMatmulPreferenceAttributes_t a, const void* v, size_t size) {
        check_lt(cublasLtMatmulPreferenceSetAttribute(pref.h, a, v, size), "cublasLtMatmulPreferenceSetAttribute",
                 where);
      };
      const uint64_t ws = cu.workspace ? cu.workspace_bytes : 0;
      set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c));
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
      if (narrow && attempt == 0) {
        const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        set_pref(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask));
      } else if (!narrow && attempt == 1) {
        break;  // float32 has nothing to relax
      }
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      check_lt(cublasLtMatmulAlgoGetHeuristic(handle, desc.h, la.h, lb.h, ld.h, ld.h, pref.h, 1, &result, &returned),
               "cublasLtMatmulAlgoGetHeuristic", where);
      if (returned > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
        algo = result.algo;
        found = true;
      }
    }
    ONYX_CHECK(found, "cuBLASLt has no algorithm for ", where, " (", dtype_name(g.dtype), ", alignments A ", al_b,
               " B ", al_a, " D ", al_d, ", workspace ", cu.workspace_bytes, " bytes)");
    std::lock_guard<std::mutex> lock(g_algo_mutex);
    g_algo_cache.emplace(key, algo);
  }

  check_lt(cublasLtMatmul(handle, desc.h, &g.alpha, g.b, la.h, g.a, lb.h, &beta, cptr, ld.h, g.d, ld.h, &algo,
                          cu.workspace, cu.workspace ? cu.workspace_bytes : 0, cu.stream),
           "cublasLtMatmul", where);
}

namespace {

std::string describe(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  return cat(op, " ", a.shape().str(), " x ", b.shape().str(), " -> ", out.shape().str());
}

// ---- MatMul ----

// numpy matmul: 1-D operands become [1, K] / [K, 1]; batch dimensions broadcast.
// The batch is split into an inner run of dimensions whose A and B offsets are
// linear in the flattened index (one strided-batched call, stride 0 where an
// operand broadcasts) and outer dimensions looped over here; a B without batch
// folds A's batch into M instead (one plain GEMM).
void matmul_run(KernelContext& ctx, CudaContext& cu) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  const std::string where = describe("MatMul", a, b, out);
  ONYX_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), "MatMul dtypes differ in ", where);
  ONYX_CHECK(a.rank() >= 1 && b.rank() >= 1, "MatMul needs inputs of rank >= 1: ", where);
  std::vector<int64_t> ad = a.shape().dims(), bd = b.shape().dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  ONYX_CHECK(k == bd[bd.size() - 2], "MatMul inner dimensions differ: ", where);
  if (out.numel() == 0) return;
  if (k == 0) {
    ONYX_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.bytes(), cu.stream));  // empty sums
    return;
  }

  // Batch dimensions, right-aligned and padded with 1s.
  const size_t ra = ad.size() - 2, rb = bd.size() - 2, r = std::max(ra, rb);
  std::vector<int64_t> da(r, 1), db(r, 1);
  for (size_t i = 0; i < ra; ++i) da[r - ra + i] = ad[i];
  for (size_t i = 0; i < rb; ++i) db[r - rb + i] = bd[i];
  // Per kept (size > 1) output batch dimension: size and element strides of A, B, D.
  struct Dim {
    int64_t size, sa, sb, sd;
  };
  std::vector<Dim> dims;
  int64_t pa = m * k, pb = k * n, pd = m * n;  // products of the dimensions to the right
  for (size_t i = r; i-- > 0;) {
    const int64_t o = std::max(da[i], db[i]);
    ONYX_CHECK((da[i] == o || da[i] == 1) && (db[i] == o || db[i] == 1), "MatMul batch dimensions do not broadcast: ",
               where);
    if (o != 1) dims.push_back({o, da[i] == 1 ? 0 : pa, db[i] == 1 ? 0 : pb, pd});
    pa *= da[i];
    pb *= db[i];
    pd *= o;
  }
  std::reverse(dims.begin(), dims.end());  // outermost first

  const bool b_has_batch = std::any_of(dims.begin(), dims.end(), [](const Dim& d) { return d.sb != 0; });
  GemmCall g;
  g.dtype = a.dtype();
  g.k = k;
  g.n = n;
  g.lda = k;
  g.ldb = n;
  g.ldd = n;
  if (!b_has_batch) {
    // Every batch dimension belongs to A (contiguous), so A is one [batch*M, K] matrix.
    int64_t count = 1;
    for (const Dim& d : dims) count *= d.size;
    g.m = count * m;
    g.a = a.raw();
    g.b = b.raw();
    g.d = out.raw();
    run_gemm(g, cu, where);
    return;
  }

  // Innermost run of batch dimensions that collapse into one strided batch.
  size_t first = dims.size() - 1;
  int64_t inner = dims.back().size;
  while (first > 0) {
    const Dim& outer = dims[first - 1];
    const Dim& in = dims[first];
    if (outer.sa != in.sa * in.size || outer.sb != in.sb * in.size) break;
    --first;
    inner *= outer.size;
  }
  g.m = m;
  g.batch = inner;
  g.stride_a = dims.back().sa;
  g.stride_b = dims.back().sb;
  g.stride_d = dims.back().sd;
  const size_t esize = dtype_size(a.dtype());
  // Outer dimensions: one call per index, with the operands' offsets.
  std::vector<int64_t> idx(first, 0);
  int64_t outer_count = 1;
  for (size_t i = 0; i < first; ++i) outer_count *= dims[i].size;
  for (int64_t t = 0; t < outer_count; ++t) {
    int64_t oa = 0, ob = 0, od = 0;
    for (size_t i = 0; i < first; ++i) {
      oa += idx[i] * dims[i].sa;
      ob += idx[i] * dims[i].sb;
      od += idx[i] * dims[i].sd;
    }
    g.a = static_cast<const char*>(a.raw()) + oa * esize;
    g.b = static_cast<const char*>(b.raw()) + ob * esize;
    g.d = static_cast<char*>(out.raw()) + od * esize;
    run_gemm(g, cu, where);
    for (size_t i = first; i-- > 0;) {
      if (++idx[i] < dims[i].size) break;
      idx[i] = 0;
    }
  }
}

// ---- Gemm ----

// How C enters: not at all, as a full [M, N] matrix (beta * C through cuBLASLt's C),
// as a row vector [N] / [1, N] broadcast over rows (the BIAS epilogue, which adds it
// unscaled, so only with beta == 1), or any other broadcast (beta * C written into D
// first, which the GEMM then reads as C with beta = 1).
enum class CForm { kNone, kFull, kRow, kBroadcast, kUnsupported };

// dims are C's dims padded to rank 2 (unknown: -1); m, n the output's (unknown: -1).
CForm classify_c(int64_t c0, int64_t c1, int64_t m, int64_t n, float beta) {
  if (c1 < 0 || c0 < 0) return CForm::kUnsupported;
  if (c1 == n && c0 == m) return CForm::kFull;
  if (c0 == 1 && c1 == n && beta == 1.f) return CForm::kRow;
  return CForm::kBroadcast;
}

bool pad_c(const PartialShape& s, int64_t& c0, int64_t& c1) {
  if (!s.rank_known || s.dims.size() > 2) return false;
  c0 = s.dims.size() == 2 ? s.dims[0] : 1;
  c1 = s.dims.empty() ? 1 : s.dims.back();
  return true;
}

void gemm_run(KernelContext& ctx, CudaContext& cu) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  Tensor& out = ctx.output(0);
  const bool ta = ctx.attr_int("transA", 0) != 0, tb = ctx.attr_int("transB", 0) != 0;
  const float alpha = ctx.attr_float("alpha", 1.f), beta = ctx.attr_float("beta", 1.f);
  std::string where = describe("Gemm", a, b, out);
  if (ctx.has_input(2)) where += cat(" with C ", ctx.input(2).shape().str());
  where += cat(" (transA=", ta, ", transB=", tb, ", alpha=", alpha, ", beta=", beta, ")");
  ONYX_CHECK(a.rank() == 2 && b.rank() == 2 && out.rank() == 2, "Gemm needs 2-D A and B: ", where);
  ONYX_CHECK(a.dtype() == b.dtype() && out.dtype() == a.dtype(), "Gemm dtypes differ in ", where);
  const int64_t m = out.shape()[0], n = out.shape()[1], k = a.shape()[ta ? 0 : 1];
  ONYX_CHECK(b.shape()[tb ? 1 : 0] == k, "Gemm inner dimensions differ: ", where);

  GemmCall g;
  g.dtype = a.dtype();
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = std::max<int64_t>(a.shape()[1], 1);
  g.ldb = std::max<int64_t>(b.shape()[1], 1);
  g.ldd = std::max<int64_t>(n, 1);
  g.alpha = alpha;
  g.a = a.raw();
  g.b = b.raw();
  g.d = out.raw();

  CForm form = CForm::kNone;
  if (ctx.has_input(2) && beta != 0.f) {
    const Tensor& c = ctx.input(2);
    ONYX_CHECK(c.dtype() == a.dtype(), "Gemm C dtype differs in ", where);
    int64_t c0 = 0, c1 = 0;
    ONYX_CHECK(pad_c(PartialShape(c.shape()), c0, c1), "Gemm C must have rank <= 2: ", where);
    ONYX_CHECK((c0 == 1 || c0 == m) && (c1 == 1 || c1 == n), "Gemm C does not broadcast to the output: ", where);
    form = classify_c(c0, c1, m, n, beta);
    ONYX_CHECK(form != CForm::kUnsupported, "Gemm on CUDA needs C of a known shape: ", where);
    if (form == CForm::kFull) {
      g.c = c.raw();
      g.beta = beta;
    } else if (form == CForm::kRow) {
      g.bias = c.raw();
    } else if (out.numel() > 0) {
      write_scaled_broadcast(c, c0, c1, m, n, beta, out.raw(), cu.stream);
      g.c = out.raw();
      g.beta = 1.f;
    }
  }
  if (out.numel() == 0) return;
  if (k == 0) {
    // No products: the output is beta * C, which needs no matmul in the forms cuBLASLt can't run.
    if (form == CForm::kNone) {
      ONYX_CUDA_CHECK(cudaMemsetAsync(out.raw(), 0, out.bytes(), cu.stream));
      return;
    }
    if (form == CForm::kRow) write_scaled_broadcast(ctx.input(2), 1, n, m, n, 1.f, out.raw(), cu.stream);
    else if (form == CForm::kFull) write_scaled_broadcast(ctx.input(2), m, n, m, n, beta, out.raw(), cu.stream);
    return;  // kBroadcast: already written
  }
  run_gemm(g, cu, where);
}

std::string float_types_reason(const char* op, const std::vector<ValueType>& in, size_t count) {
  if (in.size() < count) return cat(op, " needs ", count, " inputs");
  const DType d = in[0].dtype;
  for (size_t i = 0; i < count; ++i)
    if (!is_gemm_dtype(in[i].dtype) || in[i].dtype != d)
      return cat(op, " on CUDA supports float32/float16/bfloat16 inputs of one dtype");
  return "";
}

std::string gemm_supports(const Node& node, const std::vector<ValueType>& in) {
  NodeView v(node);
  std::string why = float_types_reason("Gemm", in, 2);
  if (!why.empty()) return why;
  const float beta = v.attr_float("beta", 1.f);
  if (!v.has_input(2) || beta == 0.f) return "";
  if (in.size() < 3 || in[2].dtype != in[0].dtype) return "Gemm on CUDA needs C of A's dtype";
  int64_t c0 = 0, c1 = 0;
  if (!pad_c(in[2].shape, c0, c1)) return "Gemm on CUDA needs C of known rank <= 2";
  if (c0 < 0 || c1 < 0) return cat("Gemm on CUDA needs C of a known shape; got C ", in[2].shape.str());
  return "";
}

// ---- Conv: im2col into the workspace (past the part cuBLASLt may use), then one product per
// column chunk, batched over the groups: y[n, g] = W[g] [Mg, Cg*K] . col[g] [Cg*K, cols] ----

constexpr size_t kConvLtWorkspace = 8ull << 20;  // of the workspace: cuBLASLt's; the rest holds col

void conv_run(KernelContext& ctx, CudaContext& cu) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (y.numel() == 0) return;
  const auto& xd = x.shape().dims();
  const auto& wd = w.shape().dims();
  const size_t nd = xd.size() - 2;
  ONYX_CHECK(xd.size() >= 3 && xd.size() <= 5 && wd.size() == xd.size(), "Conv on CUDA: input ", x.shape().str(),
             " and weights ", w.shape().str(), " (1 to 3 spatial dimensions)");
  Window win = read_window(ctx, nd, std::vector<int64_t>(wd.begin() + 2, wd.end()));
  const std::vector<int64_t> out = window_output_dims(win, std::vector<int64_t>(xd.begin() + 2, xd.end()));
  const int64_t group = ctx.attr_int("group", 1), N = xd[0], C = xd[1], M = wd[0];
  ONYX_CHECK(group >= 1 && C % group == 0 && M % group == 0 && wd[1] * group == C, "Conv: ", C,
             " input channels, weights ", w.shape().str(), " and group ", group, " do not agree");
  const int64_t Cg = C / group, Mg = M / group;
  ConvWindow cw;
  cw.nd = static_cast<int>(nd);
  int64_t kpos = 1, P = 1, image = 1;
  for (size_t d = 0; d < nd; ++d) {
    const size_t at = 3 - nd + d;
    cw.image[at] = xd[2 + d];
    cw.out[at] = out[d];
    cw.kernel[at] = win.kernel[d];
    cw.stride[at] = win.strides[d];
    cw.dilation[at] = win.dilations[d];
    cw.pad[at] = win.pads[d];
    kpos *= win.kernel[d];
    P *= out[d];
    image *= xd[2 + d];
  }
  ONYX_CHECK(y.shape().dims()[0] == N && y.shape().dims()[1] == M && y.numel() == N * M * P, "Conv: output ",
             y.shape().str(), " for input ", x.shape().str(), " and weights ", w.shape().str());
  const int64_t K = Cg * kpos;
  const size_t es = dtype_size(x.dtype());
  ONYX_CHECK(cu.workspace_bytes > kConvLtWorkspace, "Conv on CUDA needs a workspace beyond cuBLASLt's");
  // Columns per chunk: every group's col at once in the room left.
  const int64_t cols = std::min<int64_t>(
      P, static_cast<int64_t>((cu.workspace_bytes - kConvLtWorkspace) / (static_cast<size_t>(group * K) * es)));
  ONYX_CHECK(cols >= 1, "Conv on CUDA: one output position's window of ", group * K,
             " values does not fit the workspace");
  void* col = static_cast<char*>(cu.workspace) + kConvLtWorkspace;
  CudaContext lt = cu;
  lt.workspace_bytes = kConvLtWorkspace;
  const std::string where = cat("Conv ", x.shape().str(), " * ", w.shape().str(), " -> ", y.shape().str());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p0 = 0; p0 < P; p0 += cols) {
      const int64_t c = std::min(cols, P - p0);
      conv_im2col(static_cast<const char*>(x.raw()) + static_cast<size_t>(n * C * image) * es, x.dtype(), C, cw, p0,
                  c, col, cu.stream);
      GemmCall g;
      g.dtype = x.dtype();
      g.m = Mg;
      g.n = c;
      g.k = K;
      g.lda = K;
      g.ldb = c;
      g.ldd = P;
      g.batch = group;
      g.stride_a = Mg * K;
      g.stride_b = K * c;
      g.stride_d = Mg * P;
      g.a = w.raw();
      g.b = col;
      g.d = static_cast<char*>(y.raw()) + static_cast<size_t>(n * M * P + p0) * es;
      run_gemm(g, lt, where);
    }
  if (ctx.has_input(2)) add_channel_bias(y.raw(), ctx.input(2).raw(), y.dtype(), N, M, P, cu.stream);
}

std::string conv_supports(const Node& node, const std::vector<ValueType>& in) {
  if (std::string why = float_types_reason("Conv", in, 2); !why.empty()) return why;
  if (in.size() > 2 && NodeView(node).has_input(2) && in[2].dtype != in[0].dtype)
    return "Conv on CUDA needs the bias of the input's type";
  if (in[0].shape.rank_known && (in[0].shape.dims.size() < 3 || in[0].shape.dims.size() > 5))
    return "Conv on CUDA takes 1 to 3 spatial dimensions";
  return "";
}

}  // namespace

void register_matmul_kernels(CudaKernelRegistry& r) {
  r.add(onnx_kernel("MatMul", 1, matmul_run,
                      [](const Node&, const std::vector<ValueType>& in) { return float_types_reason("MatMul", in, 2); }));
  r.add(onnx_kernel("Gemm", 1, gemm_run, gemm_supports));
  r.add(onnx_kernel("Conv", 1, conv_run, conv_supports));
}

}  // namespace onyx::cuda
