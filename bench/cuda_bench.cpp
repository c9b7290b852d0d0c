// GPU microbenchmarks for onyx's CUDA kernels, each beside its ceiling in the same
// run: device-to-device copy bandwidth (the memory ceiling), and cuBLASLt's best
// algorithm for the same GEMM (the matrix ceiling). Timing: CUDA events around
// repeated launches on one stream after warm-up; the median of the repeats.
// `onyx_cuda_bench` prints every table; `onyx_cuda_bench attention` only the decode attention's,
// `onyx_cuda_bench norm` only the norm-in-the-product one (16-bit and 4-bit weights);
// `onyx_cuda_bench normprof [rows [times]]` launches q,k,v's product without and with the norm on
// their own, for a profiler (ncu -k regex:stream_kernel).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/kernels/attention.h"
#include "backends/cuda/kernels/linear.h"
#include "ops/registry.h"

using namespace onyx;

namespace {

#define CHECK(x) cuda::check_cuda((x), #x)

struct Gpu {
  cudaStream_t stream;
  cublasLtHandle_t lt;
  void* workspace;
  size_t workspace_bytes = 32ull << 20;
  Gpu() {
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cublasLtCreate(&lt);
    CHECK(cudaMalloc(&workspace, workspace_bytes));
  }
  cuda::CudaContext ctx() {
    cuda::CudaContext c;
    c.stream = stream;
    c.lt = reinterpret_cast<cublasLtContext*>(lt);
    c.workspace = workspace;
    c.workspace_bytes = workspace_bytes;
    return c;
  }
};

// Median milliseconds of `fn` over `reps` timed launches after `warm` untimed ones.
double time_ms(Gpu& g, const std::function<void()>& fn, int warm = 5, int reps = 30) {
  for (int i = 0; i < warm; ++i) fn();
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, g.stream);
    fn();
    cudaEventRecord(b, g.stream);
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

Tensor device_tensor(DType dt, Shape s, bool random_fill = true) {
  size_t bytes = static_cast<size_t>(s.numel()) * dtype_size(dt);
  void* p = nullptr;
  CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 1)));
  auto owner = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
  if (random_fill) {
    std::vector<uint8_t> host(bytes);
    std::mt19937 rng(std::random_device{}());
    if (dt == DType::kFloat32) {
      std::normal_distribution<float> n;
      for (size_t i = 0; i < bytes / 4; ++i) reinterpret_cast<float*>(host.data())[i] = n(rng);
    } else {  // 16-bit floats: random normal as bf16/f16 bits of small magnitude
      std::normal_distribution<float> n;
      for (size_t i = 0; i < bytes / 2; ++i) {
        uint16_t v = dt == DType::kBFloat16 ? BFloat16(n(rng)).bits : Float16(n(rng)).bits;
        reinterpret_cast<uint16_t*>(host.data())[i] = v;
      }
    }
    CHECK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  return Tensor::borrow(dt, std::move(s), p, owner, Device::cuda(0));
}

// Launches one op's CUDA kernel on device tensors.
struct OpLaunch {
  Node node;
  std::vector<Tensor> inputs, outputs;
  OpLaunch(const std::string& domain, const std::string& op, std::vector<Tensor> in, std::vector<Tensor> out,
           std::vector<Attribute> attrs = {}, int opset = 18) {
    node.name = op;
    node.op_type = op;
    node.domain = domain;
    node.opset = opset;
    node.attributes = std::move(attrs);
    for (size_t i = 0; i < in.size(); ++i) node.inputs.push_back(static_cast<int>(i));
    for (size_t o = 0; o < out.size(); ++o) node.outputs.push_back(static_cast<int>(in.size() + o));
    resolve_op(node, OpRegistry::global());
    inputs = std::move(in);
    outputs = std::move(out);
  }
  void run(Gpu& g, bool overlap = false) {
    const cuda::CudaKernelDef* k = cuda::CudaKernelRegistry::global().find(node);
    if (!k) throw Error(cat("no CUDA kernel for ", node.op_type));
    std::vector<const Tensor*> in;
    for (auto& t : inputs) in.push_back(&t);
    KernelContext ctx(node, in, outputs, cpu_allocator(), nullptr);
    cuda::CudaContext cu = g.ctx();
    cu.overlap_launches = overlap;
    k->run(ctx, cu);
  }
};

double copy_bandwidth(Gpu& g) {
  size_t bytes = 2ull << 30;
  void *a, *b;
  CHECK(cudaMalloc(&a, bytes));
  CHECK(cudaMalloc(&b, bytes));
  CHECK(cudaMemset(a, 1, bytes));
  double ms = time_ms(g, [&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g.stream); }, 3, 10);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * bytes / (ms * 1e-3) / 1e12;  // read + write, TB/s
}

// The fastest of cuBLASLt's top heuristic algorithms for a row-major bf16 GEMM (C = A B).
double cublas_best_bf16_ms(Gpu& g, int64_t m, int64_t n, int64_t k, const Tensor& a, const Tensor& b, Tensor& c) {
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasLtMatrixLayout_t la, lb, lc;  // column-major view: C^T = B^T A^T
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, n, k, n);
  cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k);
  cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g.workspace_bytes,
                                       sizeof(g.workspace_bytes));
  cublasLtMatmulHeuristicResult_t results[16];
  int found = 0;
  cublasLtMatmulAlgoGetHeuristic(g.lt, desc, lb, la, lc, lc, pref, 16, results, &found);
  float alpha = 1, beta = 0;
  double best = 1e30;
  for (int i = 0; i < found; ++i) {
    auto launch = [&] {
      cublasLtMatmul(g.lt, desc, &alpha, b.raw(), lb, a.raw(), la, &beta, c.raw(), lc, c.raw(), lc, &results[i].algo,
                     g.workspace, g.workspace_bytes, g.stream);
    };
    best = std::min(best, time_ms(g, launch, 3, 20));
  }
  std::printf("  cuBLASLt: %d heuristic algorithms timed\n", found);
  return best;
}

Attribute int_attr(const char* name, int64_t v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}

// Median milliseconds of one replay of a CUDA graph holding what `record` enqueues.
double graph_ms(Gpu& g, const std::function<void()>& record, int reps = 20) {
  cudaGraph_t graph;
  CHECK(cudaStreamBeginCapture(g.stream, cudaStreamCaptureModeThreadLocal));
  record();
  CHECK(cudaStreamEndCapture(g.stream, &graph));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double ms = time_ms(g, [&] { CHECK(cudaGraphLaunch(exec, g.stream)); }, 3, reps);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms;
}

// The decode step's products at few rows (Llama-3.2-1B shapes, bfloat16): onyx::Linear /
// SiluGateLinear (weight [N, K]; its streaming kernel up to 8 rows where x fits, else cuBLASLt)
// against the MatMul it replaces (cuBLASLt on the [K, N] weight,
// gate and up as one [K, 2F] product). Each is one CUDA graph of launches over weight copies
// that together exceed L2 several times, launched back to back as in a captured step; the
// time per launch is the graph's over the launches.
void few_row_products(Gpu& g, double bw) {
  struct Case {
    const char* name;
    int64_t n, k;  // outputs, inputs (gated: F outputs from 2F weight rows)
    bool gated;
  };
  const std::vector<Case> cases = {{"q,k,v 3072x2048", 3072, 2048, false},
                                   {"o 2048x2048", 2048, 2048, false},
                                   {"gate,up 2x8192x2048", 8192, 2048, true},
                                   {"down 2048x8192", 2048, 8192, false},
                                   {"lm head 128256x2048", 128256, 2048, false}};
  std::printf("\n| rows | product | weight MB | onyx Linear us | TB/s | no overlap us | cuBLASLt MatMul us | TB/s | "
              "MatMul / Linear |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  const DType dt = DType::kBFloat16;
  std::string paths;
  for (const Case& c : cases) {
    const int64_t rows_w = c.gated ? 2 * c.n : c.n;
    const double bytes = static_cast<double>(rows_w * c.k) * 2;
    const int copies = static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes)));
    std::vector<Tensor> w_nk, w_kn;
    for (int i = 0; i < copies; ++i) {
      w_nk.push_back(device_tensor(dt, Shape{rows_w, c.k}));
      w_kn.push_back(device_tensor(dt, Shape{c.k, rows_w}));
    }
    for (int64_t m : {1, 2, 4, 8}) {
      Tensor x = device_tensor(dt, Shape{m, c.k});
      Tensor y = device_tensor(dt, Shape{m, c.n}, false);
      Tensor y2 = device_tensor(dt, Shape{m, rows_w}, false);
      std::vector<OpLaunch> lin, mm;
      for (int i = 0; i < copies; ++i) {
        lin.emplace_back("onyx", c.gated ? "SiluGateLinear" : "Linear", std::vector<Tensor>{x, w_nk[i]},
                         std::vector<Tensor>{y}, std::vector<Attribute>{}, 1);
        mm.emplace_back("", "MatMul", std::vector<Tensor>{x, w_kn[i]}, std::vector<Tensor>{y2});
      }
      auto per_launch = [&](std::vector<OpLaunch>& ops, bool overlap) {
        return graph_ms(g, [&] {
                 for (auto& op : ops) op.run(g, overlap);
               }) * 1e3 / copies;
      };
      const double lin_us = per_launch(lin, true), lin_plain_us = per_launch(lin, false), mm_us = per_launch(mm, false);
      // The few-row paths side by side: the streaming kernel's warp-per-row and tensor-core forms
      // and onyx's cuBLASLt path (the same op, cuda::set_few_row_path).
      cuda::set_few_row_path(cuda::FewRowPath::kTensorCores);
      const double mma_us = per_launch(lin, true);
      cuda::set_few_row_path(cuda::FewRowPath::kLibrary);
      const double lib_us = per_launch(lin, true);
      cuda::set_few_row_path(cuda::FewRowPath::kDefault);
      char line[256];
      std::snprintf(line, sizeof line, "| %lld | %s | %.2f (%.2f) | %.2f (%.2f) | %.2f (%.2f) | %s |\n",
                    static_cast<long long>(m), c.name, lin_us, bytes / (lin_us * 1e-6) / 1e12, mma_us,
                    bytes / (mma_us * 1e-6) / 1e12, lib_us, bytes / (lib_us * 1e-6) / 1e12,
                    m == 1 ? "warp per row" : "tensor cores");
      paths += line;
      std::printf("| %lld | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", static_cast<long long>(m), c.name,
                  bytes / 1e6, lin_us, bytes / (lin_us * 1e-6) / 1e12, lin_plain_us, mm_us,
                  bytes / (mm_us * 1e-6) / 1e12, mm_us / lin_us);
    }
  }
  std::printf("(copy bandwidth %.2f TB/s, read + write)\n", bw);
  std::printf("\nonyx Linear's few-row paths, us (TB/s):\n\n| rows | product | default | tensor-core form | "
              "cuBLASLt path | default is |\n|---:|---|---:|---:|---:|---|\n%s",
              paths.c_str());
}

// What the norm costs a product at 1 to 8 rows: onyx::RmsNormLinear (x + skip normalized by
// gamma in the product's kernel, the decode step's q,k,v and gate,up nodes) against the same
// product without the norm (Linear, SiluGateLinear), us per launch in a graph over weight copies
// larger than L2, launched back to back as programmatic dependents, as in a captured step; then
// the same with 4-bit weights (RmsNormLinearNBits against LinearNBits, blocks of 32).
void norm_products(Gpu& g) {
  struct Case {
    const char* name;
    int64_t n, k;
    bool gated;
  };
  const std::vector<Case> cases = {{"q,k,v 3072x2048", 3072, 2048, false}, {"gate,up 2x8192x2048", 8192, 2048, true}};
  std::printf("\nthe norm in the product, us per launch (bf16):\n\n| rows | product | without the norm | "
              "with the norm | difference |\n|---:|---|---:|---:|---:|\n");
  const DType dt = DType::kBFloat16;
  // The table's rows of one product at 1, 2, 4 and 8 rows of x: `build` adds `copies` launches
  // without and with the norm over the tensors given; at one row also the 8-row form's, where
  // `eight_row_form`.
  using Build = std::function<void(const Tensor& x, const Tensor& skip, const Tensor& sum, const Tensor& y,
                                   const Attribute& eps, std::vector<OpLaunch>& plain, std::vector<OpLaunch>& normed)>;
  auto table_rows = [&](const Case& c, const std::string& label, int copies, bool eight_row_form, const Build& build) {
    for (int64_t m : {1, 2, 4, 8}) {
      Tensor x = device_tensor(dt, Shape{m, c.k});
      Tensor skip = device_tensor(dt, Shape{m, c.k});
      Tensor sum = device_tensor(dt, Shape{m, c.k}, false);
      Tensor y = device_tensor(dt, Shape{m, c.n}, false);
      Attribute eps;
      eps.name = "epsilon";
      eps.kind = Attribute::Kind::kFloat;
      eps.f = 1e-5f;
      std::vector<OpLaunch> plain, normed;
      build(x, skip, sum, y, eps, plain, normed);
      auto per_launch = [&](std::vector<OpLaunch>& ops) {
        return graph_ms(g, [&] {
                 for (auto& op : ops) op.run(g, true);
               }) * 1e3 / copies;
      };
      const double a = per_launch(plain), b = per_launch(normed);
      std::printf("| %lld | %s | %.2f | %.2f | %+.2f |\n", static_cast<long long>(m), label.c_str(), a, b, b - a);
      if (m == 1 && eight_row_form) {  // the 8-row (tensor-core) form at one row, as two to eight rows take it
        cuda::set_few_row_path(cuda::FewRowPath::kTensorCores);
        const double a8 = per_launch(plain), b8 = per_launch(normed);
        cuda::set_few_row_path(cuda::FewRowPath::kDefault);
        std::printf("| 1 (8-row form) | %s | %.2f | %.2f | %+.2f |\n", label.c_str(), a8, b8, b8 - a8);
      }
    }
  };
  for (const Case& c : cases) {
    const int64_t rows_w = c.gated ? 2 * c.n : c.n;
    const double bytes = static_cast<double>(rows_w * c.k) * 2;
    const int copies = static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes)));
    std::vector<Tensor> w;
    for (int i = 0; i < copies; ++i) w.push_back(device_tensor(dt, Shape{rows_w, c.k}));
    Tensor gamma = device_tensor(dt, Shape{c.k});
    table_rows(c, c.name, copies, true,
               [&](const Tensor& x, const Tensor& skip, const Tensor& sum, const Tensor& y, const Attribute& eps,
                   std::vector<OpLaunch>& plain, std::vector<OpLaunch>& normed) {
                 for (int i = 0; i < copies; ++i) {
                   plain.emplace_back("onyx", c.gated ? "SiluGateLinear" : "Linear", std::vector<Tensor>{x, w[i]},
                                      std::vector<Tensor>{y}, std::vector<Attribute>{}, 1);
                   normed.emplace_back("onyx", "RmsNormLinear", std::vector<Tensor>{x, skip, gamma, w[i]},
                                       std::vector<Tensor>{sum, y},
                                       std::vector<Attribute>{eps, int_attr("gated", c.gated ? 1 : 0)}, 1);
                 }
               });
  }
  // 4 bits, blocks of 32: onyx::RmsNormLinearNBits against LinearNBits.
  for (const Case& c : cases) {
    const int64_t rows_w = c.gated ? 2 * c.n : c.n, block = 32, kb = c.k / block;
    const double bytes = static_cast<double>(rows_w * c.k / 2 + rows_w * kb * 2);
    const int copies = static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes)));
    std::vector<Tensor> packed, scales;
    for (int i = 0; i < copies; ++i) {
      Tensor b = device_tensor(dt, Shape{rows_w, kb, block / 4});  // random bytes: 2 bytes per bf16
      packed.push_back(Tensor::borrow(DType::kUInt8, Shape{rows_w, kb, block / 2}, b.raw(), b.storage(), b.device()));
      scales.push_back(device_tensor(dt, Shape{rows_w, kb}));
    }
    Tensor gamma = device_tensor(dt, Shape{c.k});
    const std::vector<Attribute> attrs = {int_attr("K", c.k), int_attr("N", rows_w), int_attr("block_size", block),
                                          int_attr("bits", 4), int_attr("gated", c.gated ? 1 : 0)};
    table_rows(c, std::string(c.name) + ", 4 bits b32", copies, false,
               [&](const Tensor& x, const Tensor& skip, const Tensor& sum, const Tensor& y, const Attribute& eps,
                   std::vector<OpLaunch>& plain, std::vector<OpLaunch>& normed) {
                 std::vector<Attribute> norm_attrs = attrs;
                 norm_attrs.push_back(eps);
                 for (int i = 0; i < copies; ++i) {
                   plain.emplace_back("onyx", "LinearNBits", std::vector<Tensor>{x, packed[i], scales[i]},
                                      std::vector<Tensor>{y}, attrs, 1);
                   normed.emplace_back("onyx", "RmsNormLinearNBits",
                                       std::vector<Tensor>{x, skip, gamma, packed[i], scales[i]},
                                       std::vector<Tensor>{sum, y}, norm_attrs, 1);
                 }
               });
  }
}

// For a profiler: q,k,v's product at `rows` rows, without the norm, then with it, each launched
// `times` times on its own (no graph, no overlap), synchronized after each.
void norm_profile(Gpu& g, int64_t rows, int times) {
  const DType dt = DType::kBFloat16;
  const int64_t n = 3072, k = 2048;
  Tensor w = device_tensor(dt, Shape{n, k}), gamma = device_tensor(dt, Shape{k});
  Tensor x = device_tensor(dt, Shape{rows, k}), skip = device_tensor(dt, Shape{rows, k});
  Tensor sum = device_tensor(dt, Shape{rows, k}, false), y = device_tensor(dt, Shape{rows, n}, false);
  Attribute eps;
  eps.name = "epsilon";
  eps.kind = Attribute::Kind::kFloat;
  eps.f = 1e-5f;
  OpLaunch plain("onyx", "Linear", {x, w}, {y}, {}, 1);
  OpLaunch normed("onyx", "RmsNormLinear", {x, skip, gamma, w}, {sum, y}, {eps, int_attr("gated", 0)}, 1);
  for (OpLaunch* op : {&plain, &normed})
    for (int i = 0; i < times; ++i) {
      op->run(g);
      CHECK(cudaStreamSynchronize(g.stream));
    }
  std::printf("profiled q,k,v at %lld rows, %d launches each\n", static_cast<long long>(rows), times);
}

// The same shapes with 4-bit weights (com.microsoft MatMulNBits, bfloat16 A and scales, blocks of
// 32 and 128, no zero points), 1 and 8 rows of A: time per launch in a graph over weight copies,
// and the bandwidth over the packed weights and scales, for each kernel the 4-bit product can take
// (cuda::nbits4_variant_for_bench), side by side in one run. The last row of each block size and
// row count, "layer", launches a layer's four products in turn (q,k,v; o; gate,up; down), as a
// decode step does: per layer, so a product follows another one as it does there.
// `only`: the products whose name holds it (all when empty), `only_block`/`only_rows` (0: all).
void four_bit_products(Gpu& g, const std::string& only = "", int64_t only_block = 0, int64_t only_rows = 0) {
  struct Shape2 {
    int64_t n, k;
  };
  struct Case {
    const char* name;
    std::vector<Shape2> products;  // launched in turn
  };
  const std::vector<Case> cases = {{"q,k,v 3072x2048", {{3072, 2048}}},
                                   {"o 2048x2048", {{2048, 2048}}},
                                   {"gate,up 16384x2048", {{16384, 2048}}},
                                   {"down 2048x8192", {{2048, 8192}}},
                                   {"lm head 128256x2048", {{128256, 2048}}},
                                   {"layer", {{3072, 2048}, {2048, 2048}, {16384, 2048}, {2048, 8192}}}};
  const std::vector<std::pair<int, const char*>> variants = {
      {1, "per-value float"}, {2, "tensor cores"}, {6, "4 warps"}, {4, "8 warps"}, {7, "16 warps"},
      {9, "streaming, 16-row tiles"}, {10, "streaming, 32-row tiles"}, {0, "streaming (default)"}};
  std::printf("\n4-bit products, us (TB/s of packed weights and scales) by kernel:\n\n| product | block | rows | MB |");
  for (const auto& v : variants) std::printf(" %s |", v.second);
  std::printf("\n|---|---:|---:|---:|");
  for (size_t i = 0; i < variants.size(); ++i) std::printf("---:|");
  std::printf("\n");
  for (int64_t block : {32, 128})
    for (int64_t rows : {1, 8})
      for (const Case& c : cases) {
        if ((!only.empty() && std::string(c.name).find(only) == std::string::npos) ||
            (only_block && block != only_block) || (only_rows && rows != only_rows))
          continue;
        double bytes = 0;
        for (const Shape2& pr : c.products) bytes += static_cast<double>(pr.n * pr.k / 2 + pr.n * (pr.k / block) * 2);
        const int copies = static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes)));
        std::vector<OpLaunch> ops;
        std::vector<Tensor> xs, ys;
        for (const Shape2& pr : c.products) {
          xs.push_back(device_tensor(DType::kBFloat16, Shape{rows, pr.k}));
          ys.push_back(device_tensor(DType::kBFloat16, Shape{rows, pr.n}, false));
        }
        for (int i = 0; i < copies; ++i)
          for (size_t j = 0; j < c.products.size(); ++j) {
            const Shape2& pr = c.products[j];
            const int64_t kb = pr.k / block;
            Tensor b = device_tensor(DType::kBFloat16, Shape{pr.n, kb, block / 4});  // random bytes: 2 bytes per bf16
            Tensor packed = Tensor::borrow(DType::kUInt8, Shape{pr.n, kb, block / 2}, b.raw(), b.storage(), b.device());
            Tensor scales = device_tensor(DType::kBFloat16, Shape{pr.n, kb});
            ops.emplace_back("com.microsoft", "MatMulNBits", std::vector<Tensor>{xs[j], packed, scales},
                             std::vector<Tensor>{ys[j]},
                             std::vector<Attribute>{int_attr("K", pr.k), int_attr("N", pr.n),
                                                    int_attr("block_size", block), int_attr("bits", 4)},
                             1);
          }
        std::printf("| %s | %lld | %lld | %.1f |", c.name, static_cast<long long>(block),
                    static_cast<long long>(rows), bytes / 1e6);
        for (const auto& v : variants) {
          cuda::nbits4_variant_for_bench = v.first;
          const double us = graph_ms(g, [&] {
                              for (auto& op : ops) op.run(g, true);
                            }) * 1e3 / copies;
          std::printf(" %.2f (%.2f) |", us, bytes / (us * 1e-6) / 1e12);
        }
        cuda::nbits4_variant_for_bench = 0;
        std::printf("\n");
      }
}

// Decode attention (the ONNX Attention op's decode kernel) at the 1.24B Llama's shapes: 32 query
// heads over 8 KV heads of 64, one new position per sequence over a past of 512 or 8,192, bf16,
// with and without a bool mask. Time per launch in a graph over copies of K and V larger than L2,
// and the bandwidth over K and V, for the kernel's own choice of key splits and for fixed ones
// (cuda::attention_decode_splits_for_bench), side by side in one run.
void decode_attention(Gpu& g) {
  const std::vector<int> splits = {0, 1, 2, 4, 8, 16};
  std::printf("\ndecode attention (32 query heads, 8 KV heads of 64, bf16), us (TB/s of K and V) by key splits:\n\n"
              "| batch | past | mask | KV MB |");
  for (int s : splits) s ? std::printf(" %d |", s) : std::printf(" default |");
  std::printf("\n|---:|---:|---|---:|");
  for (size_t i = 0; i < splits.size(); ++i) std::printf("---:|");
  std::printf("\n");
  const DType dt = DType::kBFloat16;
  for (int64_t S : {512, 8192})
    for (int64_t B : {1, 2, 4, 8})
      for (bool masked : {false, true}) {
        const double bytes = 2.0 * B * 8 * S * 64 * 2;
        const int copies = static_cast<int>(std::max(2.0, std::ceil(400e6 / bytes)));
        Tensor q = device_tensor(dt, Shape{B, 32, 1, 64});
        Tensor y = device_tensor(dt, Shape{B, 32, 1, 64}, false);
        Tensor mask = device_tensor(DType::kUInt8, Shape{B, 1, 1, S}, false);
        CHECK(cudaMemset(mask.raw(), 1, static_cast<size_t>(B * S)));
        Tensor bool_mask = Tensor::borrow(DType::kBool, Shape{B, 1, 1, S}, mask.raw(), mask.storage(), mask.device());
        std::vector<OpLaunch> ops;
        for (int i = 0; i < copies; ++i) {
          Tensor k = device_tensor(dt, Shape{B, 8, S, 64}), v = device_tensor(dt, Shape{B, 8, S, 64});
          std::vector<Tensor> in{q, k, v};
          if (masked) in.push_back(bool_mask);
          ops.emplace_back("", "Attention", in, std::vector<Tensor>{y}, std::vector<Attribute>{}, 23);
        }
        std::printf("| %lld | %lld | %s | %.1f |", static_cast<long long>(B), static_cast<long long>(S),
                    masked ? "bool" : "none", bytes / 1e6);
        for (int s : splits) {
          cuda::attention_decode_splits_for_bench = s;
          const double us = graph_ms(g, [&] {
                              for (auto& op : ops) op.run(g, true);
                            }) * 1e3 / copies;
          std::printf(" %.2f (%.2f) |", us, bytes / (us * 1e-6) / 1e12);
        }
        cuda::attention_decode_splits_for_bench = 0;
        std::printf("\n");
      }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    Gpu g;
    if (argc > 1 && std::string(argv[1]) == "attention") {  // the decode attention table alone
      decode_attention(g);
      return 0;
    }
    if (argc > 1 && std::string(argv[1]) == "norm") {  // the norm-in-the-product table alone
      norm_products(g);
      return 0;
    }
    if (argc > 1 && std::string(argv[1]) == "normprof") {  // [rows [times]]: for ncu
      norm_profile(g, argc > 2 ? std::stoll(argv[2]) : 2, argc > 3 ? std::stoi(argv[3]) : 3);
      return 0;
    }
    if (argc > 1 && std::string(argv[1]) == "nbits") {  // the 4-bit table alone: [name [block [rows]]]
      four_bit_products(g, argc > 2 ? argv[2] : "", argc > 3 ? std::stoll(argv[3]) : 0,
                        argc > 4 ? std::stoll(argv[4]) : 0);
      return 0;
    }
    double bw = copy_bandwidth(g);
    std::printf("| measurement | time | achieved | ceiling | fraction |\n|---|---:|---:|---:|---:|\n");
    std::printf("| D2D copy 2 GiB (read+write) | | %.2f TB/s | | |\n", bw);

    const int64_t n = 4096;
    Tensor a = device_tensor(DType::kBFloat16, Shape{n, n});
    Tensor b = device_tensor(DType::kBFloat16, Shape{n, n});
    Tensor c = device_tensor(DType::kBFloat16, Shape{n, n}, false);
    OpLaunch mm("", "MatMul", {a, b}, {c});
    double onyx_ms = time_ms(g, [&] { mm.run(g); }, 5, 30);
    double best_ms = cublas_best_bf16_ms(g, n, n, n, a, b, c);
    double flops = 2.0 * n * n * n;
    std::printf(
        "| bf16 GEMM 4096^3, onyx MatMul | %.3f ms | %.0f TFLOP/s | %.0f TFLOP/s (cuBLASLt best, %.3f ms) | %.3f |\n",
        onyx_ms, flops / (onyx_ms * 1e-3) / 1e12, flops / (best_ms * 1e-3) / 1e12, best_ms, best_ms / onyx_ms);

    for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
      const int64_t rows = 16384, cols = 4096;
      Tensor x = device_tensor(dt, Shape{rows, cols});
      Tensor y = device_tensor(dt, Shape{rows, cols});
      Tensor scale = device_tensor(dt, Shape{cols});
      Tensor out = device_tensor(dt, Shape{rows, cols}, false);
      OpLaunch add("", "Add", {x, y}, {out});
      double add_ms = time_ms(g, [&] { add.run(g); });
      double add_bytes = 3.0 * x.bytes();
      std::printf("| Add %s [16384,4096] | %.3f ms | %.2f TB/s | %.2f TB/s (copy) | %.3f |\n",
                  std::string(dtype_name(dt)).c_str(), add_ms, add_bytes / (add_ms * 1e-3) / 1e12, bw,
                  add_bytes / (add_ms * 1e-3) / 1e12 / bw);
      Attribute eps;
      eps.name = "epsilon";
      eps.kind = Attribute::Kind::kFloat;
      eps.f = 1e-6f;
      OpLaunch rms("", "SimplifiedLayerNormalization", {x, scale}, {out}, {int_attr("axis", -1), eps}, 18);
      double rms_ms = time_ms(g, [&] { rms.run(g); });
      double rms_bytes = 2.0 * x.bytes() + scale.bytes();
      std::printf("| RMSNorm %s [16384,4096] | %.3f ms | %.2f TB/s | %.2f TB/s (copy) | %.3f |\n",
                  std::string(dtype_name(dt)).c_str(), rms_ms, rms_bytes / (rms_ms * 1e-3) / 1e12, bw,
                  rms_bytes / (rms_ms * 1e-3) / 1e12 / bw);
    }
    few_row_products(g, bw);
    norm_products(g);
    four_bit_products(g);
    decode_attention(g);
    CHECK(cudaDeviceSynchronize());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: error: %s\n", e.what());
    return 1;
  }
}
