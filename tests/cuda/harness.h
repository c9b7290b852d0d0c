// The CUDA kernel test harness: each case is one node run twice, on the CPU
// (compute_node, the reference) and through the op's CUDA kernel on device
// copies of the same inputs; the outputs are compared element by element.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backends/backend.h"
#include "backends/cuda_entry.h"
#include "backends/cuda/cuda_kernels.h"
#include "common/attributes.h"
#include "model/ir.h"

namespace onyx::cuda::test {

// Stands for "the case's dtype" in an input spec; a case runs once per dtype in its list.
inline constexpr DType kT = DType::kUndefined;

// How an input's values are drawn (fresh every run, never all zeros).
enum class Fill {
  kSigned,    // magnitude uniform in [0.1, 3], random sign (no zeros: safe divisors)
  kPositive,  // uniform in [lo, hi], lo > 0 (Sqrt, Log, Pow bases)
  kUniform,   // uniform in [lo, hi] (may cross zero)
  kInts,      // integers uniform in [lo, hi], zero skipped; stored in any dtype
  kBools,     // random true/false
  kValues,    // exactly `values`
  kOmitted,   // an omitted optional input
};

struct In {
  Fill fill = Fill::kSigned;
  DType dtype = kT;
  Shape shape;
  double lo = 0, hi = 0;
  std::vector<double> values;
};

// Input spec builders.
inline In X(Shape s, DType d = kT) { return {Fill::kSigned, d, std::move(s)}; }
inline In Pos(Shape s, double lo = 0.1, double hi = 3, DType d = kT) { return {Fill::kPositive, d, std::move(s), lo, hi}; }
inline In Uni(Shape s, double lo, double hi, DType d = kT) { return {Fill::kUniform, d, std::move(s), lo, hi}; }
inline In Ints(Shape s, double lo, double hi, DType d = kT) { return {Fill::kInts, d, std::move(s), lo, hi}; }
inline In Bools(Shape s) { return {Fill::kBools, DType::kBool, std::move(s)}; }
inline In Vals(DType d, Shape s, std::vector<double> v) { return {Fill::kValues, d, std::move(s), 0, 0, std::move(v)}; }
inline In I64(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Vals(DType::kInt64, Shape{n}, std::move(v));
}
inline In Scalar(double v, DType d = kT) { return Vals(d, Shape{}, {v}); }
inline In None() { return {Fill::kOmitted}; }

// What the kernel's supports() is expected to say about a case.
enum class Expect {
  kRun,      // must be supported, and must match the CPU
  kMayFall,  // may decline (the case is then skipped, with the reason); if it runs it must match
  kDecline,  // must decline (the node falls back to the CPU)
};

struct Case {
  std::string name;  // unique within the op, letters/digits/underscores
  std::string op;
  std::vector<DType> types;
  std::vector<In> inputs;
  std::vector<Attribute> attrs = {};
  int outputs = 1;
  int opset = 18;
  std::string domain = "";
  Expect expect = Expect::kRun;
  double f32_tol = 1e-5;  // relative to max|reference|
  double f16_tol = 1e-2;  // the same, for float16/bfloat16 outputs
  // (output, input) pairs: the output is written into the input's own device buffer, as a
  // shared past/present KV buffer is bound (compared with the CPU's unaliased outputs).
  std::vector<std::pair<int, int>> alias = {};
};

// One test: a case at one dtype.
struct TestCase {
  Case c;
  DType t = DType::kFloat32;
  std::string id;  // gtest name
};

std::vector<TestCase> expand(const std::vector<Case>& cases);
// The cases of onyx::Linear, SiluGateLinear and RmsNormLinear (cases_linear.cpp).
void linear_cases(std::vector<Case>& v);
void PrintTo(const TestCase& tc, std::ostream* os);

// Runs one test case (gtest assertions inside).
void run_case(const TestCase& tc);

// The session's CUDA state, made by main() when a device is present.
CudaContext& context();

// Attribute builders.
using onyx::test::attr_float;
using onyx::test::attr_int;
using onyx::test::attr_ints;
using onyx::test::attr_string;
using onyx::test::attr_tensor;

inline const std::vector<DType> kFloats = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
inline const std::vector<DType> kFloatsInts = {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kInt32,
                                               DType::kInt64};
inline const std::vector<DType> kInts = {DType::kInt32, DType::kInt64};
inline const std::vector<DType> kAll = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                        DType::kInt32,   DType::kInt64,   DType::kBool};

}  // namespace onyx::cuda::test

// Tests that need a GPU: skipped, saying why, where there is none (--cpu_reference_only).
#define REQUIRE_GPU()                                                                  \
  do {                                                                                 \
    std::string why_no_gpu;                                                            \
    if (::onyx::cuda_device_count(&why_no_gpu) == 0)                                   \
      GTEST_SKIP() << "needs a CUDA device: " << why_no_gpu;                           \
  } while (0)
