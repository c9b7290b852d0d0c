#include "harness.h"

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "ops/compute.h"
#include "ops/registry.h"

namespace onyx::cuda::test {

namespace {

CudaContext g_cu;
// --cpu_reference_only: check the table itself (inputs, inference, CPU reference) without a GPU.
bool g_cpu_only = false;

// CUDA runtime calls of the harness itself (not the kernel under test).
void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(cat("harness: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

std::string short_name(DType d) {
  switch (d) {
    case DType::kFloat32: return "f32";
    case DType::kFloat16: return "f16";
    case DType::kBFloat16: return "bf16";
    case DType::kInt32: return "i32";
    case DType::kInt64: return "i64";
    case DType::kBool: return "bool";
    default: return std::string(dtype_name(d));
  }
}

bool is_float(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }

Tensor make_tensor(DType d, const Shape& s, const std::vector<double>& v) {
  Tensor t(d, s);
  if (static_cast<int64_t>(v.size()) != t.numel())
    throw Error(cat("harness: ", v.size(), " values for ", t.type_str()));
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double x = v[static_cast<size_t>(i)];
    switch (d) {
      case DType::kFloat32: t.data<float>()[i] = static_cast<float>(x); break;
      case DType::kFloat16: t.data<Float16>()[i] = Float16(static_cast<float>(x)); break;
      case DType::kBFloat16: t.data<BFloat16>()[i] = BFloat16(static_cast<float>(x)); break;
      case DType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(x); break;
      case DType::kInt64: t.data<int64_t>()[i] = static_cast<int64_t>(x); break;
      case DType::kBool: t.data<bool>()[i] = x != 0; break;
      case DType::kUInt8: t.data<uint8_t>()[i] = static_cast<uint8_t>(x); break;
      default: throw Error(cat("harness cannot fill ", dtype_name(d)));
    }
  }
  return t;
}

Tensor draw(const In& in, DType d, std::mt19937_64& rng) {
  const int64_t n = in.shape.numel();
  std::vector<double> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto nonzero_int = [&](int64_t lo, int64_t hi) {
    std::uniform_int_distribution<int64_t> u(lo, hi);
    for (;;) {
      int64_t x = u(rng);
      if (x != 0 || (lo == 0 && hi == 0)) return static_cast<double>(x);
    }
  };
  const bool integral = !is_float(d);
  for (double& x : v) {
    switch (in.fill) {
      case Fill::kSigned:
        if (d == DType::kBool)
          x = unit(rng) < 0.5;
        else if (integral)
          x = nonzero_int(-9, 9);
        else
          x = (0.1 + 2.9 * unit(rng)) * (unit(rng) < 0.5 ? -1 : 1);
        break;
      case Fill::kPositive:
        x = integral ? nonzero_int(std::max<int64_t>(1, static_cast<int64_t>(in.lo)), static_cast<int64_t>(in.hi))
                     : in.lo + (in.hi - in.lo) * unit(rng);
        break;
      case Fill::kUniform:
        x = in.lo + (in.hi - in.lo) * unit(rng);
        if (integral) x = std::round(x);
        break;
      case Fill::kInts: x = nonzero_int(static_cast<int64_t>(in.lo), static_cast<int64_t>(in.hi)); break;
      case Fill::kBools: x = unit(rng) < 0.5; break;
      case Fill::kValues:
      case Fill::kOmitted: break;
    }
  }
  if (in.fill == Fill::kValues) v = in.values;
  return make_tensor(d, in.shape, v);
}

// Device memory owned through a shared_ptr, so borrowed tensors keep it alive.
std::shared_ptr<void> device_alloc(size_t bytes) {
  void* p = nullptr;
  ok(cudaMalloc(&p, std::max<size_t>(bytes, 1)), "cudaMalloc");
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

Tensor to_device(const Tensor& host) {
  auto mem = device_alloc(host.bytes());
  if (host.bytes()) ok(cudaMemcpy(mem.get(), host.raw(), host.bytes(), cudaMemcpyHostToDevice), "upload");
  return Tensor::borrow(host.dtype(), host.shape(), mem.get(), mem);
}

Tensor to_host(const Tensor& dev) {
  Tensor t(dev.dtype(), dev.shape());
  if (t.bytes()) ok(cudaMemcpy(t.raw(), dev.raw(), t.bytes(), cudaMemcpyDeviceToHost), "download");
  return t;
}

Node make_node(const TestCase& tc, const std::vector<Tensor>& inputs) {
  Node n;
  n.name = "node_under_test";
  n.op_type = tc.c.op;
  n.domain = tc.c.domain;
  n.opset = tc.c.opset;
  n.attributes = tc.c.attrs;
  int id = 0;
  for (const Tensor& t : inputs) n.inputs.push_back(t.defined() ? id++ : -1);
  for (int o = 0; o < tc.c.outputs; ++o) n.outputs.push_back(id++);
  resolve_op(n, OpRegistry::global());
  return n;
}

struct GpuRun {
  std::string error;  // the kernel's or the launch's failure, if any
  std::vector<Tensor> outputs;
};

// Infers output types from host copies, allocates poisoned device outputs, runs the
// CUDA kernel on device inputs on the session stream, and downloads the outputs.
GpuRun run_gpu(const Node& node, const CudaKernelDef& kernel, const std::vector<Tensor>& host_in,
               const std::vector<Tensor>& dev_in, unsigned char poison,
               const std::vector<std::pair<int, int>>& alias = {}) {
  GpuRun r;
  // An aliased input gets a copy of its own for this run, which the output is bound to.
  std::vector<Tensor> shared(dev_in.size());
  for (const auto& [o, i] : alias) shared[static_cast<size_t>(i)] = to_device(host_in[static_cast<size_t>(i)]);
  std::vector<ValueType> types(host_in.size());
  std::vector<const Tensor*> host_ptrs(host_in.size(), nullptr), dev_ptrs(dev_in.size(), nullptr);
  for (size_t i = 0; i < host_in.size(); ++i)
    if (host_in[i].defined()) {
      types[i] = ValueType{host_in[i].dtype(), host_in[i].shape()};
      host_ptrs[i] = &host_in[i];
      dev_ptrs[i] = shared[i].defined() ? &shared[i] : &dev_in[i];
    }
  InferContext ictx(node, types, host_ptrs);
  node.def->infer(ictx);
  std::vector<Tensor> outs(node.outputs.size());
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    const ValueType& vt = ictx.outputs()[o];
    if (!vt.shape.fully_known()) throw Error(cat("inference left output ", o, " without a full shape"));
    const Shape s = vt.shape.to_shape();
    bool bound = false;
    for (const auto& [ao, ai] : alias)
      if (static_cast<size_t>(ao) == o) {
        const Tensor& in = shared[static_cast<size_t>(ai)];
        if (!(in.shape() == s) || in.dtype() != vt.dtype)
          throw Error(cat("output ", o, " ", s.str(), " cannot share input ", ai, "'s buffer ", in.shape().str()));
        outs[o] = in;
        bound = true;
      }
    if (bound) continue;
    auto mem = device_alloc(static_cast<size_t>(s.numel()) * dtype_size(vt.dtype));
    ok(cudaMemset(mem.get(), poison, static_cast<size_t>(s.numel()) * dtype_size(vt.dtype)), "poison");
    outs[o] = Tensor::borrow(vt.dtype, s, mem.get(), mem);
  }
  CudaContext& cu = context();
  try {
    KernelContext kctx(node, dev_ptrs, outs, cpu_allocator(), nullptr);
    kernel.run(kctx, cu);
  } catch (const std::exception& e) {
    r.error = cat("CUDA kernel threw: ", e.what());
  }
  cudaError_t e = cudaStreamSynchronize(cu.stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess && r.error.empty())
    r.error = cat("CUDA error after the kernel: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (!r.error.empty()) return r;
  for (const Tensor& t : outs) r.outputs.push_back(to_host(t));
  return r;
}

bool all_bytes(const Tensor& t, int64_t i, unsigned char b) {
  const size_t es = dtype_size(t.dtype());
  const auto* p = static_cast<const unsigned char*>(t.raw()) + static_cast<size_t>(i) * es;
  for (size_t k = 0; k < es; ++k)
    if (p[k] != b) return false;
  return true;
}

std::string index_str(const Shape& s, int64_t flat) {
  std::vector<int64_t> idx(s.rank());
  for (size_t d = s.rank(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  std::string out = "[";
  for (size_t d = 0; d < idx.size(); ++d) out += cat(d ? "," : "", idx[d]);
  return out + "]";
}

// Compares output `o`. `ambiguous` collects integer elements whose poison (-1)
// equals the reference, which a second run with another poison must settle.
void compare(const std::string& what, const Tensor& ref, const Tensor& got, double f32_tol, double f16_tol,
             bool* ambiguous) {
  ASSERT_EQ(dtype_name(ref.dtype()), dtype_name(got.dtype())) << what << ": dtype";
  ASSERT_EQ(ref.shape().str(), got.shape().str()) << what << ": shape";
  const int64_t n = ref.numel();
  int64_t unwritten = 0, first_unwritten = -1;
  if (is_float(ref.dtype())) {
    const double tol = ref.dtype() == DType::kFloat32 ? f32_tol : f16_tol;
    double max_ref = 0, max_err = 0;
    int64_t worst = -1, bad_special = 0, first_special = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (all_bytes(got, i, 0xFF)) {
        if (first_unwritten < 0) first_unwritten = i;
        ++unwritten;
        continue;
      }
      const double a = ref.get_as_double(i), b = got.get_as_double(i);
      if (!std::isfinite(a) || !std::isfinite(b)) {
        // NaN must meet NaN; infinities must match exactly.
        if (!((std::isnan(a) && std::isnan(b)) || a == b)) {
          if (first_special < 0) first_special = i;
          ++bad_special;
        }
        continue;
      }
      max_ref = std::max(max_ref, std::abs(a));
      const double err = std::abs(a - b);
      if (err > max_err) {
        max_err = err;
        worst = i;
      }
    }
    EXPECT_EQ(unwritten, 0) << what << ": " << unwritten << " of " << n << " elements never written (first at "
                            << index_str(ref.shape(), first_unwritten) << ")";
    EXPECT_EQ(bad_special, 0) << what << ": " << bad_special << " NaN/Inf mismatches, first at "
                              << index_str(ref.shape(), first_special) << ": reference "
                              << (first_special >= 0 ? ref.get_as_double(first_special) : 0) << ", CUDA "
                              << (first_special >= 0 ? got.get_as_double(first_special) : 0);
    const double scale = max_ref > 0 ? max_ref : 1.0;
    EXPECT_LE(max_err / scale, tol) << what << ": max |cuda - cpu| = " << max_err << " vs max |cpu| = " << max_ref
                                    << "; worst at " << index_str(ref.shape(), worst) << ": cpu "
                                    << ref.get_as_double(worst) << ", cuda " << got.get_as_double(worst);
    return;
  }
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (ref.dtype() == DType::kBool) {
      const unsigned char b = static_cast<const unsigned char*>(got.raw())[i];
      if (b == 0xFF) {
        if (first_unwritten < 0) first_unwritten = i;
        ++unwritten;
        continue;
      }
      if (b > 1 || (b != 0) != ref.data<bool>()[i]) {
        if (first < 0) first = i;
        ++mismatches;
      }
      continue;
    }
    const int64_t a = ref.get_as_int64(i), b = got.get_as_int64(i);
    if (a != b) {
      if (first < 0) first = i;
      ++mismatches;
    } else if (a == -1 && ambiguous) {
      *ambiguous = true;
    }
  }
  EXPECT_EQ(unwritten, 0) << what << ": " << unwritten << " of " << n << " elements never written (first at "
                          << index_str(ref.shape(), first_unwritten) << ")";
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << n << " elements differ; first at "
                           << index_str(ref.shape(), first) << ": cpu " << (first >= 0 ? ref.get_as_int64(first) : 0)
                           << ", cuda "
                           << (first >= 0
                                   ? (ref.dtype() == DType::kBool
                                          ? static_cast<int64_t>(static_cast<const unsigned char*>(got.raw())[first])
                                          : got.get_as_int64(first))
                                   : 0);
}

}  // namespace

CudaContext& context() { return g_cu; }


std::vector<TestCase> expand(const std::vector<Case>& cases) {
  std::vector<TestCase> out;
  std::set<std::string> seen;
  for (const Case& c : cases)
    for (DType t : c.types) {
      std::string dom = c.domain.empty() ? "" : "ms_";
      TestCase tc{c, t, cat(dom, c.op, "_", c.name, "_", short_name(t))};
      if (!seen.insert(tc.id).second) throw Error(cat("duplicate CUDA test case ", tc.id));
      out.push_back(std::move(tc));
    }
  return out;
}

void PrintTo(const TestCase& tc, std::ostream* os) { *os << tc.id; }

void run_case(const TestCase& tc) {
  const std::string dom = tc.c.domain;
  const CudaKernelDef* kernel = CudaKernelRegistry::global().find(dom, tc.c.op, tc.c.opset);
  if (!kernel && !g_cpu_only) {
    ADD_FAILURE() << "no CUDA kernel for " << (dom.empty() ? "" : dom + "::") << tc.c.op;
    return;
  }
  uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("ONYX_CUDA_TEST_SEED")) seed = std::strtoull(s, nullptr, 10);
  SCOPED_TRACE(cat("seed ", seed, " (reproduce with ONYX_CUDA_TEST_SEED=", seed, " --gtest_filter=*", tc.id, ")"));
  std::mt19937_64 rng(seed);

  std::vector<Tensor> host_in;
  for (const In& in : tc.c.inputs)
    host_in.push_back(in.fill == Fill::kOmitted ? Tensor() : draw(in, in.dtype == kT ? tc.t : in.dtype, rng));
  Node node = make_node(tc, host_in);

  std::vector<ValueType> types(host_in.size());
  for (size_t i = 0; i < host_in.size(); ++i)
    if (host_in[i].defined()) types[i] = ValueType{host_in[i].dtype(), host_in[i].shape()};
  if (g_cpu_only) {
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : host_in) ptrs.push_back(t.defined() ? &t : nullptr);
    try {
      std::vector<Tensor> ref = compute_node(node, ptrs, cpu_allocator());
      ASSERT_EQ(ref.size(), static_cast<size_t>(tc.c.outputs));
    } catch (const std::exception& e) {
      FAIL() << "the CPU reference threw (a bad case?): " << e.what();
    }
    if (kernel && kernel->supports && tc.c.expect != Expect::kMayFall) {
      const std::string why = kernel->supports(node, types);
      EXPECT_EQ(why.empty(), tc.c.expect == Expect::kRun) << "supports() says: '" << why << "'";
    }
    return;
  }
  const std::string why = kernel->supports ? kernel->supports(node, types) : "";
  if (tc.c.expect == Expect::kDecline) {
    EXPECT_FALSE(why.empty()) << "the CUDA kernel for " << tc.c.op << " should decline this case";
    return;
  }
  if (!why.empty()) {
    if (tc.c.expect == Expect::kMayFall) GTEST_SKIP() << "declined by the CUDA kernel: " << why;
    ADD_FAILURE() << "the CUDA kernel for " << tc.c.op << " declines: " << why;
    return;
  }

  std::vector<const Tensor*> cpu_ptrs;
  for (const Tensor& t : host_in) cpu_ptrs.push_back(t.defined() ? &t : nullptr);
  std::vector<Tensor> ref;
  try {
    ref = compute_node(node, cpu_ptrs, cpu_allocator());
  } catch (const std::exception& e) {
    FAIL() << "the CPU reference threw (a bad case?): " << e.what();
  }

  std::vector<Tensor> dev_in;
  for (const Tensor& t : host_in) dev_in.push_back(t.defined() ? to_device(t) : Tensor());

  GpuRun run = run_gpu(node, *kernel, host_in, dev_in, 0xFF, tc.c.alias);
  ASSERT_TRUE(run.error.empty()) << run.error;
  ASSERT_EQ(run.outputs.size(), ref.size());
  bool ambiguous = false;
  for (size_t o = 0; o < ref.size(); ++o)
    compare(cat("output ", o, " (", ref[o].type_str(), ")"), ref[o], run.outputs[o], tc.c.f32_tol, tc.c.f16_tol,
            &ambiguous);
  if (ambiguous) {
    // Integer -1 is also the 0xFF poison: rerun poisoned with zeros to prove those were written.
    GpuRun again = run_gpu(node, *kernel, host_in, dev_in, 0x00, tc.c.alias);
    ASSERT_TRUE(again.error.empty()) << again.error;
    for (size_t o = 0; o < ref.size(); ++o)
      compare(cat("output ", o, " (", ref[o].type_str(), ", zero-poisoned rerun)"), ref[o], again.outputs[o],
              tc.c.f32_tol, tc.c.f16_tol, nullptr);
  }
}

}  // namespace onyx::cuda::test

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--cpu_reference_only") == 0) onyx::cuda::test::g_cpu_only = true;
  if (!GTEST_FLAG_GET(list_tests) && !onyx::cuda::test::g_cpu_only) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      std::printf("SKIPPED: no CUDA device (%s)\n",
                  e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
      return 77;
    }
    auto& cu = onyx::cuda::test::context();
    try {
      using onyx::cuda::test::ok;
      ok(cudaSetDevice(0), "cudaSetDevice");
      ok(cudaStreamCreateWithFlags(&cu.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      cublasLtHandle_t lt = nullptr;
      if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) throw onyx::Error("cublasLtCreate failed");
      cu.lt = lt;
      cu.workspace_bytes = size_t{32} << 20;
      ok(cudaMalloc(&cu.workspace, cu.workspace_bytes), "cudaMalloc(workspace)");
      cu.device = 0;
      cu.overlap_launches = true;  // as sessions launch them (SessionOptions::overlap_launches)
    } catch (const std::exception& e) {
      std::printf("CUDA setup failed: %s\n", e.what());
      return 1;
    }
  }
  const int rc = RUN_ALL_TESTS();
  const auto* u = testing::UnitTest::GetInstance();
  std::printf("cuda kernels: %d passed, %d failed, %d skipped\n", u->successful_test_count(), u->failed_test_count(),
              u->skipped_test_count());
  return rc;
}
