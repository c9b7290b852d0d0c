// onyx::RotaryCache's CUDA kernel with its presents bound to the caches it updates (the
// generator's static cache, in place): only the new rows are written, the rest of each cache is
// left as it was, and the result equals the CPU reference (which copies). The case table
// (cases.cpp) covers the copying forms. The same for onyx::RotaryCacheAttention, whose fused
// kernel (the decode attention writing the new rows itself) runs only bound in place.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backends/cuda/kernels/attention.h"
#include "common/attributes.h"
#include "harness.h"
#include "ops/compute.h"
#include "ops/registry.h"

namespace onyx {

namespace {

void ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

Tensor random_of(DType t, Shape s, std::mt19937_64& rng) {
  Tensor out(t, std::move(s));
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const float x = u(rng);
    if (t == DType::kFloat32) out.data<float>()[i] = x;
    else if (t == DType::kFloat16) out.data<Float16>()[i] = Float16(x);
    else out.data<BFloat16>()[i] = BFloat16(x);
  }
  return out;
}

struct DeviceTensor {
  void* p = nullptr;
  Tensor t;
  explicit DeviceTensor(const Tensor& host) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(host.bytes(), 1)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, host.raw(), host.bytes(), cudaMemcpyHostToDevice), cudaSuccess);
    // From pageable memory the copy may still be on its way when cudaMemcpy returns, and the
    // kernels run on a stream that does not wait for the default one.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    t = Tensor::borrow(host.dtype(), host.shape(), p, nullptr);
  }
  ~DeviceTensor() { cudaFree(p); }
  Tensor download() const {
    Tensor h(t.dtype(), t.shape());
    EXPECT_EQ(cudaMemcpy(h.raw(), p, h.bytes(), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// max |a - b| / max |a|
double rel_err(const Tensor& a, const Tensor& b) {
  double err = 0, scale = 1e-30;
  for (int64_t i = 0; i < a.numel(); ++i) {
    scale = std::max(scale, std::abs(a.get_as_double(i)));
    err = std::max(err, std::abs(a.get_as_double(i) - b.get_as_double(i)));
  }
  return err / scale;
}

// Device copies of `host` (each input), and the list of them a KernelContext takes.
struct DeviceInputs {
  std::vector<std::unique_ptr<DeviceTensor>> copies;
  std::vector<const Tensor*> ptrs;
  explicit DeviceInputs(const std::vector<Tensor>& host) {
    for (const Tensor& h : host) {
      copies.push_back(std::make_unique<DeviceTensor>(h));
      ptrs.push_back(&copies.back()->t);
    }
  }
  DeviceTensor& operator[](size_t i) { return *copies[i]; }
};

// An onyx-domain node over inputs 0..inputs-1 and the given outputs, resolved.
Node onyx_node(const char* op, size_t inputs, std::vector<int> outputs, std::vector<Attribute> attrs = {}) {
  Node node;
  node.name = op;
  node.op_type = op;
  node.domain = "onyx";
  node.opset = 1;
  for (size_t i = 0; i < inputs; ++i) node.inputs.push_back(static_cast<int>(i));
  node.outputs = std::move(outputs);
  node.attributes = std::move(attrs);
  resolve_op(node, OpRegistry::global());
  return node;
}

// The CPU reference outputs of `node` on `host`.
std::vector<Tensor> reference(const Node& node, const std::vector<Tensor>& host) {
  std::vector<const Tensor*> ptrs;
  for (const Tensor& h : host) ptrs.push_back(&h);
  return compute_node(node, ptrs, cpu_allocator());
}

// A device error word for the test context while it lives (the harness sets none).
struct ErrorWord {
  unsigned int* p = nullptr;
  ErrorWord() {
    EXPECT_EQ(cudaMalloc(&p, sizeof(unsigned int)), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, sizeof(unsigned int)), cudaSuccess);
    cuda::test::context().error_word = p;
  }
  ~ErrorWord() {
    cuda::test::context().error_word = nullptr;
    cudaFree(p);
  }
  unsigned int take() {
    unsigned int w = 0;
    EXPECT_EQ(cudaMemcpy(&w, p, sizeof(w), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(cudaMemset(p, 0, sizeof(unsigned int)), cudaSuccess);
    return w;
  }
};

Tensor bool_mask(Shape s, const Tensor& index, int64_t len, std::mt19937_64& rng) {
  // Every row sees the positions up to its last new one, a few holes among them, none after.
  Tensor m(DType::kBool, std::move(s));
  const int64_t B = m.shape()[0], C = m.shape()[3];
  for (int64_t b = 0; b < B; ++b) {
    const int64_t last = index.get_as_int64(index.numel() == 1 ? 0 : b) + len - 1;
    for (int64_t j = 0; j < C; ++j) m.data<bool>()[b * C + j] = j <= last && (j == last || rng() % 5 != 0);
  }
  return m;
}

}  // namespace

TEST(RotaryCacheAttentionGpu, BoundInPlaceMatchesTheReferenceAndTheTwoKernels) {
  REQUIRE_GPU();
  const cuda::CudaKernelDef* kernel = cuda::CudaKernelRegistry::global().find("onyx", "RotaryCacheAttention", 1);
  ASSERT_NE(kernel, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  ErrorWord err;
  struct Shape5 {
    int64_t B, Hq, Hkv, L, C;
  };
  // Group sizes 1, 4 and 8 (rows 1, 4, 8 of the decode kernel), two new positions, capacities
  // that take one key split and many (the new rows in a late split); one batch row (the two
  // kernels: the fused one runs from two rows up); at 4 rows both forms of the decode kernel (the
  // short one at 16 KV heads in all, the long one at 64).
  const std::vector<Shape5> shapes{{2, 32, 8, 1, 600},  {3, 8, 2, 1, 40},   {2, 8, 8, 1, 130},
                                   {2, 16, 2, 1, 1030}, {2, 8, 2, 2, 300}, {1, 32, 8, 1, 600},
                                   {8, 32, 8, 1, 600}};
  // The fused kernel at every shape it takes (its own threshold of batch rows set to 1), then the
  // shipped threshold (one to three rows on the two kernels).
  struct MinRows {
    int saved = cuda::rotary_attention_min_rows;
    ~MinRows() { cuda::rotary_attention_min_rows = saved; }
  } restore;
  int runs = 0;
  for (int min_rows : {1, restore.saved})
  for (DType t : {DType::kBFloat16, DType::kFloat16, DType::kFloat32})
    for (int64_t D : {64, 128})
      for (const Shape5& sh : shapes)
        for (int mask_kind : {0, 1, 2}) {  // none, bool, additive
          const int64_t B = sh.B, Hq = sh.Hq, Hkv = sh.Hkv, L = sh.L, C = sh.C;
          std::vector<int64_t> at(static_cast<size_t>(B));
          for (int64_t b = 0; b < B; ++b) at[b] = b == 0 ? C - L : static_cast<int64_t>(rng() % (C - L + 1));
          const Tensor index = (B == 1 || mask_kind == 0) ? Tensor::from_vector<int64_t>({at[0]}, Shape{})
                                                          : Tensor::from_vector<int64_t>(at, Shape{B});
          cuda::rotary_attention_min_rows = min_rows;
          SCOPED_TRACE(cat("fused from ", min_rows, " rows, ", dtype_name(t), " D ", D, " B ", B, " Hq ", Hq, " Hkv ", Hkv, " L ", L, " C ", C, " mask ",
                           mask_kind, " index ", index.shape().str()));
          std::vector<Tensor> host{random_of(t, Shape{B, Hq, L, D}, rng),  random_of(t, Shape{B, Hkv, L, D}, rng),
                                   random_of(t, Shape{B, Hkv, L, D}, rng), random_of(t, Shape{1, 1, L, D}, rng),
                                   random_of(t, Shape{1, 1, L, D}, rng),   random_of(t, Shape{B, Hkv, C, D}, rng),
                                   random_of(t, Shape{B, Hkv, C, D}, rng), index};
          if (mask_kind == 1) host.push_back(bool_mask(Shape{B, 1, 1, C}, index, L, rng));
          if (mask_kind == 2) host.push_back(random_of(t, Shape{B, 1, L, C}, rng));
          const Node node = onyx_node("RotaryCacheAttention", host.size(), {20, 21, 22, 23},
                                      {test::attr_int("split", D / 2),
                                       test::attr_float("scale", 1.f / std::sqrt(float(D)))});
          const std::vector<Tensor> ref = reference(node, host);

          // In place (the fused kernel where it applies), then with fresh presents (the two kernels).
          DeviceInputs dev(host);
          const std::vector<const Tensor*>& dev_ptrs = dev.ptrs;
          DeviceTensor q_rot(random_of(t, Shape{B, Hq, L, D}, rng)), y(random_of(t, Shape{B, Hq, L, D}, rng));
          std::vector<Tensor> outs{q_rot.t, dev[5].t, dev[6].t, y.t};
          KernelContext ctx(node, dev_ptrs, outs, cpu_allocator(), nullptr);
          kernel->run(ctx, cuda::test::context());
          DeviceTensor pk(random_of(t, Shape{B, Hkv, C, D}, rng)), pv(random_of(t, Shape{B, Hkv, C, D}, rng));
          DeviceTensor q_rot2(random_of(t, Shape{B, Hq, L, D}, rng)), y2(random_of(t, Shape{B, Hq, L, D}, rng));
          std::vector<Tensor> outs2{q_rot2.t, pk.t, pv.t, y2.t};
          {
            // The caches as they were (the in-place run above changed the device copies).
            DeviceTensor k0(host[5]), v0(host[6]);
            std::vector<const Tensor*> ptrs2 = dev_ptrs;
            ptrs2[5] = &k0.t;
            ptrs2[6] = &v0.t;
            KernelContext ctx2(node, ptrs2, outs2, cpu_allocator(), nullptr);
            kernel->run(ctx2, cuda::test::context());
            ok(cudaStreamSynchronize(cuda::test::context().stream), "sync");
          }
          ok(cudaGetLastError(), "the kernels");
          EXPECT_EQ(err.take(), 0u) << "no device error";
          const double tol = t == DType::kFloat32 ? 1e-5 : 2e-2;
          EXPECT_LE(rel_err(ref[3], y.download()), tol) << "y";
          EXPECT_LE(rel_err(ref[0], q_rot.download()), tol) << "q_rot";
          const Tensor k = dev[5].download(), v = dev[6].download();
          EXPECT_LE(rel_err(ref[1], k), tol) << "the key cache";
          EXPECT_LE(rel_err(ref[2], v), 0.0) << "the value cache (copied, exact)";
          EXPECT_LE(rel_err(y2.download(), y.download()), t == DType::kFloat32 ? 1e-6 : 4e-3)
              << "in place against the two kernels";
          for (int64_t b = 0; b < B; ++b)
            for (int64_t h = 0; h < Hkv; ++h)
              for (int64_t p = 0; p < C; ++p) {
                const int64_t a = index.get_as_int64(index.numel() == 1 ? 0 : b);
                if (p >= a && p < a + L) continue;
                const int64_t o = ((b * Hkv + h) * C + p) * D;
                for (int64_t d = 0; d < D; d += 7) {
                  ASSERT_EQ(k.get_as_double(o + d), host[5].get_as_double(o + d)) << "key row " << b << "," << h << "," << p;
                  ASSERT_EQ(v.get_as_double(o + d), host[6].get_as_double(o + d)) << "value row " << b << "," << h << "," << p;
                }
              }
          ++runs;
        }
  EXPECT_EQ(runs, 2 * 3 * 2 * static_cast<int>(shapes.size()) * 3);
}

// A position past the cache: the fused kernel writes nothing, sets the cache-position error (the
// executor reports it after the run), and still computes the attention over the cache as it was.
TEST(RotaryCacheAttentionGpu, APositionPastTheCacheIsReportedAndWritesNothing) {
  REQUIRE_GPU();
  const cuda::CudaKernelDef* kernel = cuda::CudaKernelRegistry::global().find("onyx", "RotaryCacheAttention", 1);
  ASSERT_NE(kernel, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  const DType t = DType::kBFloat16;
  const int64_t B = 1, Hq = 8, Hkv = 2, D = 64, C = 64;
  ErrorWord err;
  struct MinRows {  // the fused kernel at this one row
    int saved = cuda::rotary_attention_min_rows;
    MinRows() { cuda::rotary_attention_min_rows = 1; }
    ~MinRows() { cuda::rotary_attention_min_rows = saved; }
  } fused_here;
  for (int64_t bad : {C, int64_t{-1}}) {
    SCOPED_TRACE(cat("index ", bad));
    std::vector<Tensor> host{random_of(t, Shape{B, Hq, 1, D}, rng),  random_of(t, Shape{B, Hkv, 1, D}, rng),
                             random_of(t, Shape{B, Hkv, 1, D}, rng), random_of(t, Shape{1, 1, 1, D}, rng),
                             random_of(t, Shape{1, 1, 1, D}, rng),   random_of(t, Shape{B, Hkv, C, D}, rng),
                             random_of(t, Shape{B, Hkv, C, D}, rng), Tensor::from_vector<int64_t>({bad}, Shape{})};
    const Node node = onyx_node("RotaryCacheAttention", 8, {20, 21, 22, 23}, {test::attr_int("split", D / 2)});
    DeviceInputs dev(host);
    const std::vector<const Tensor*>& dev_ptrs = dev.ptrs;
    DeviceTensor q_rot(random_of(t, Shape{B, Hq, 1, D}, rng)), y(random_of(t, Shape{B, Hq, 1, D}, rng));
    std::vector<Tensor> outs{q_rot.t, dev[5].t, dev[6].t, y.t};
    KernelContext ctx(node, dev_ptrs, outs, cpu_allocator(), nullptr);
    kernel->run(ctx, cuda::test::context());
    ok(cudaStreamSynchronize(cuda::test::context().stream), "sync");
    EXPECT_NE(err.take() & cuda::kDeviceErrorCachePosition, 0u);
    EXPECT_LE(rel_err(host[5], dev[5].download()), 0.0) << "the key cache is unchanged";
    EXPECT_LE(rel_err(host[6], dev[6].download()), 0.0) << "the value cache is unchanged";
    const Tensor yh = y.download();
    for (int64_t i = 0; i < yh.numel(); ++i) ASSERT_TRUE(std::isfinite(yh.get_as_double(i))) << i;
  }
}

TEST(RotaryCacheGpu, BoundInPlaceWritesOnlyTheNewRows) {
  REQUIRE_GPU();
  const cuda::CudaKernelDef* kernel = cuda::CudaKernelRegistry::global().find("onyx", "RotaryCache", 1);
  ASSERT_NE(kernel, nullptr);
  std::mt19937_64 rng(std::random_device{}());
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    for (int64_t D : {64, 128, 12})
      for (const Tensor& index : {Tensor::from_vector<int64_t>({7}, Shape{}),
                                  Tensor::from_vector<int64_t>({0, 15}, Shape{2})}) {
        SCOPED_TRACE(cat(dtype_name(t), " D ", D, " index ", index.shape().str()));
        const int64_t B = 2, Hq = 8, Hkv = 2, S = 1, C = 16;
        std::vector<Tensor> host{random_of(t, Shape{B, Hq, S, D}, rng),  random_of(t, Shape{B, Hkv, S, D}, rng),
                                 random_of(t, Shape{B, Hkv, S, D}, rng),  random_of(t, Shape{B, 1, S, D}, rng),
                                 random_of(t, Shape{B, 1, S, D}, rng),    random_of(t, Shape{B, Hkv, C, D}, rng),
                                 random_of(t, Shape{B, Hkv, C, D}, rng),  index};
        const Node node = onyx_node("RotaryCache", 8, {8, 9, 10});
        const std::vector<Tensor> ref = reference(node, host);
        DeviceInputs dev(host);
        const std::vector<const Tensor*>& dev_ptrs = dev.ptrs;
        DeviceTensor q_rot(random_of(t, Shape{B, Hq, S, D}, rng));
        std::vector<Tensor> outs{q_rot.t, dev[5].t, dev[6].t};  // the presents are the caches
        KernelContext ctx(node, dev_ptrs, outs, cpu_allocator(), nullptr);
        kernel->run(ctx, cuda::test::context());
        ok(cudaStreamSynchronize(cuda::test::context().stream), "sync");
        ok(cudaGetLastError(), "the kernel");
        const double tol = t == DType::kFloat32 ? 1e-6 : 1e-2;
        EXPECT_LE(rel_err(ref[0], q_rot.download()), tol) << "q_rot";
        const Tensor k = dev[5].download(), v = dev[6].download();
        EXPECT_LE(rel_err(ref[1], k), tol) << "the key cache";
        EXPECT_LE(rel_err(ref[2], v), 0.0) << "the value cache (copied, exact)";
        // The rows not written are the caches' own, bit for bit.
        for (int64_t b = 0; b < B; ++b) {
          const int64_t at = index.get_as_int64(index.numel() == 1 ? 0 : b);
          for (int64_t h = 0; h < Hkv; ++h)
            for (int64_t p = 0; p < C; ++p) {
              if (p >= at && p < at + S) continue;
              const int64_t o = ((b * Hkv + h) * C + p) * D;
              for (int64_t d = 0; d < D; ++d)
                ASSERT_EQ(k.get_as_double(o + d), host[5].get_as_double(o + d)) << "key row " << b << "," << h << "," << p;
            }
        }
      }
}

}  // namespace onyx
