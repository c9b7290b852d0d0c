// A GPU tensor-parallel group (make_nccl_communicator, src/backends/cuda/nccl.cpp) over every GPU
// this process sees, one thread a rank: the sum and the rank-ordered gather of random device
// buffers against the host's, float32 and bfloat16; and the AllGather kernel's placement of each
// rank's columns when the gathered axis is not the first.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <thread>

#include "backends/cuda/cuda_kernels.h"
#include "harness.h"
#include "onyx/communicator.h"
#include "ops/registry.h"

namespace onyx {

namespace {

void ok(cudaError_t e, const char* what) { ASSERT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e); }

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n;
}

std::shared_ptr<Communicator> group_of_all(int n) {
  setenv("NCCL_NVLS_ENABLE", "0", 1);  // never NVLink multicast (the lent machines' rule)
  std::vector<int> devices(n);
  for (int i = 0; i < n; ++i) devices[i] = i;
  // gpu/run.sh names PyTorch's copy of NCCL there (the GPU machine's image has no other).
  const char* library = std::getenv("ONYX_NCCL_LIBRARY");
  return make_nccl_communicator(devices, library ? library : "");
}

TEST(CollectivesGpu, NcclGroupSumsAndGathersEveryRanksBuffer) {
  const int n = gpus();
  ASSERT_GE(n, 1);
  auto group = group_of_all(n);
  const size_t count = 1000;
  std::vector<std::vector<float>> x(n, std::vector<float>(count));
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> normal;
  for (auto& v : x)
    for (float& f : v) f = normal(rng);
  std::vector<std::vector<float>> sum(n, std::vector<float>(count)), gathered(n, std::vector<float>(count * n));
  std::vector<std::vector<uint16_t>> sum_bf16(n, std::vector<uint16_t>(count));
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      ok(cudaSetDevice(r), "cudaSetDevice");
      cudaStream_t s;
      ok(cudaStreamCreate(&s), "cudaStreamCreate");
      float *dx, *dy, *dg;
      uint16_t *bx, *by;
      ok(cudaMalloc(&dx, count * 4), "cudaMalloc");
      ok(cudaMalloc(&dy, count * 4), "cudaMalloc");
      ok(cudaMalloc(&dg, count * 4 * n), "cudaMalloc");
      ok(cudaMalloc(&bx, count * 2), "cudaMalloc");
      ok(cudaMalloc(&by, count * 2), "cudaMalloc");
      std::vector<uint16_t> hb(count);
      for (size_t i = 0; i < count; ++i) hb[i] = BFloat16(x[r][i]).bits;
      ok(cudaMemcpy(dx, x[r].data(), count * 4, cudaMemcpyHostToDevice), "copy");
      ok(cudaMemcpy(bx, hb.data(), count * 2, cudaMemcpyHostToDevice), "copy");
      group->all_reduce_sum_device(r, dx, dy, count, DType::kFloat32, s);
      group->all_gather_device(r, dx, dg, count * 4, s);
      group->all_reduce_sum_device(r, bx, by, count, DType::kBFloat16, s);
      ok(cudaStreamSynchronize(s), "sync");
      ok(cudaMemcpy(sum[r].data(), dy, count * 4, cudaMemcpyDeviceToHost), "copy");
      ok(cudaMemcpy(gathered[r].data(), dg, count * 4 * n, cudaMemcpyDeviceToHost), "copy");
      ok(cudaMemcpy(sum_bf16[r].data(), by, count * 2, cudaMemcpyDeviceToHost), "copy");
      for (void* p : {static_cast<void*>(dx), static_cast<void*>(dy), static_cast<void*>(dg), static_cast<void*>(bx),
                      static_cast<void*>(by)})
        cudaFree(p);
      cudaStreamDestroy(s);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) {
      double want = 0;
      for (int q = 0; q < n; ++q) want += x[q][i];
      ASSERT_NEAR(sum[r][i], want, 1e-5 * n) << "rank " << r << " element " << i;
      BFloat16 b;
      b.bits = sum_bf16[r][i];
      ASSERT_NEAR(float(b), want, 0.02 * n + 0.02 * std::abs(want));
      for (int q = 0; q < n; ++q) ASSERT_EQ(gathered[r][q * count + i], x[q][i]) << "rank " << r << " from " << q;
    }
}

// AllGather along the last axis of [3, 5] (three outer rows: the workspace path) on a group of
// one GPU: y is x, each row's block put back where it belongs.
TEST(CollectivesGpu, AllGatherKernelPutsEachRowsBlockInPlace) {
  auto group = group_of_all(1);
  const int64_t id = register_communicator(group);
  Node node;
  node.domain = "onyx";
  node.op_type = "AllGather";
  node.opset = 1;
  node.inputs = {0};
  node.outputs = {1};
  node.attributes = {cuda::test::attr_int("communicator", id), cuda::test::attr_int("rank", 0),
                     cuda::test::attr_int("world", 1), cuda::test::attr_int("axis", -1)};
  resolve_op(node, OpRegistry::global());
  const cuda::CudaKernelDef* k = cuda::CudaKernelRegistry::global().find(node);
  ASSERT_NE(k, nullptr);
  std::vector<float> host(15);
  for (int i = 0; i < 15; ++i) host[i] = 0.5f * i - 3;
  float *dx, *dy;
  ok(cudaMalloc(&dx, 60), "cudaMalloc");
  ok(cudaMalloc(&dy, 60), "cudaMalloc");
  ok(cudaMemcpy(dx, host.data(), 60, cudaMemcpyHostToDevice), "copy");
  ok(cudaMemset(dy, 0xFF, 60), "poison");
  Tensor x = Tensor::borrow(DType::kFloat32, Shape{3, 5}, dx);
  std::vector<Tensor> outs{Tensor::borrow(DType::kFloat32, Shape{3, 5}, dy)};
  KernelContext ctx(node, {&x}, outs, cpu_allocator(), nullptr);
  k->run(ctx, cuda::test::context());
  ok(cudaStreamSynchronize(cuda::test::context().stream), "sync");
  std::vector<float> got(15);
  ok(cudaMemcpy(got.data(), dy, 60, cudaMemcpyDeviceToHost), "copy");
  EXPECT_EQ(got, host);
  cudaFree(dx);
  cudaFree(dy);
}

}  // namespace

}  // namespace onyx
