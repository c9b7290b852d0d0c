// onyx::RotaryCache's CUDA kernel with its presents bound to the caches it updates (the
// generator's static cache, in place): only the new rows are written, the rest of each cache is
// left as it was, and the result equals the CPU reference (which copies). The case table
// (cases.cpp) covers the copying forms.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

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

}  // namespace

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
        Node node;
        node.name = "rotary_cache";
        node.op_type = "RotaryCache";
        node.domain = "onyx";
        node.opset = 1;
        for (int i = 0; i < 8; ++i) node.inputs.push_back(i);
        node.outputs = {8, 9, 10};
        resolve_op(node, OpRegistry::global());
        std::vector<const Tensor*> host_ptrs;
        for (const Tensor& h : host) host_ptrs.push_back(&h);
        const std::vector<Tensor> ref = compute_node(node, host_ptrs, cpu_allocator());

        std::vector<std::unique_ptr<DeviceTensor>> dev;
        std::vector<const Tensor*> dev_ptrs;
        for (const Tensor& h : host) {
          dev.push_back(std::make_unique<DeviceTensor>(h));
          dev_ptrs.push_back(&dev.back()->t);
        }
        DeviceTensor q_rot(random_of(t, Shape{B, Hq, S, D}, rng));
        std::vector<Tensor> outs{q_rot.t, dev[5]->t, dev[6]->t};  // the presents are the caches
        KernelContext ctx(node, dev_ptrs, outs, cpu_allocator(), nullptr);
        kernel->run(ctx, cuda::test::context());
        ok(cudaStreamSynchronize(cuda::test::context().stream), "sync");
        ok(cudaGetLastError(), "the kernel");
        const double tol = t == DType::kFloat32 ? 1e-6 : 1e-2;
        EXPECT_LE(rel_err(ref[0], q_rot.download()), tol) << "q_rot";
        const Tensor k = dev[5]->download(), v = dev[6]->download();
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
