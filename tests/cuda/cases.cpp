// The table of CUDA kernel cases: every op with a CUDA kernel, at every dtype the
// kernel is meant to support. A case whose op has no CUDA kernel fails ("no CUDA
// kernel for OP"); one the kernel's supports() declines fails too, unless the case
// says the kernel may (kMayFall) or must (kDecline) decline it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>

#include "harness.h"
#include "ops/registry.h"

namespace onyx::cuda::test {
namespace {

using D = DType;
bool is_float_like(DType d) { return d == D::kFloat32 || d == D::kFloat16 || d == D::kBFloat16; }
const int64_t kBig = (int64_t{1} << 20) + 3;  // odd: exercises grid-stride loops and vector tails

void elementwise(std::vector<Case>& v) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    // Integer Div stays on the CPU, which reports a division by zero.
    const auto& types = std::string(op) == "Div" ? kFloats : kFloatsInts;
    v.push_back({"same", op, types, {X({3, 4, 5}), X({3, 4, 5})}});
    v.push_back({"bcast", op, types, {X({4, 1, 8}), X({3, 1})}});
    v.push_back({"scalar", op, types, {X({6, 7}), X({})}});
    v.push_back({"scalar_lhs", op, kFloats, {X({}), X({5, 3})}});
  }
  v.push_back({"ints", "Div", kInts, {X({3, 4}), X({3, 4})}, {}, 1, 18, "", Expect::kDecline});
  for (const char* op : {"And", "Or", "Xor"}) v.push_back({"bcast", op, {D::kBool}, {Bools({4, 1, 6}), Bools({5, 1})}});
  v.push_back({"basic", "Not", {D::kBool}, {Bools({7, 9})}});
  v.push_back({"two", "Sum", kFloatsInts, {X({4, 6}), X({6})}});
  v.push_back({"big", "Add", kFloats, {X({kBig}), X({kBig})}});
  v.push_back({"big_bcast", "Mul", {D::kFloat32}, {X({1027, 1021}), X({1021})}});
  v.push_back({"big", "Add", kInts, {X({kBig}), X({1})}});
  v.push_back({"same", "Pow", kFloats, {Pos({4, 9}, 0.5, 2), Uni({4, 9}, -2, 2)}});
  v.push_back({"bcast", "Pow", kFloats, {Pos({2, 3, 5}), Uni({5}, -2, 2)}});
  v.push_back({"square", "Pow", kFloats, {X({7, 5}), Scalar(2)}});
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    // Small integers, so that equal pairs occur for every dtype.
    v.push_back({"same", op, kFloatsInts, {Ints({5, 6}, -2, 2), Ints({5, 6}, -2, 2)}});
    v.push_back({"bcast", op, kFloatsInts, {Ints({4, 1, 8}, -2, 2), Ints({3, 1}, -2, 2)}});
  }
  v.push_back({"bool", "Equal", {D::kBool}, {Bools({4, 6}), Bools({6})}});
  v.push_back({"same", "Where", kAll, {Bools({4, 5}), X({4, 5}), X({4, 5})}});
  v.push_back({"bcast", "Where", kAll, {Bools({3, 1, 5}), X({4, 1}), X({})}});
  v.push_back({"big", "Where", {D::kFloat32}, {Bools({kBig}), X({kBig}), X({1})}});
  for (const char* op : {"Max", "Min"}) {
    v.push_back({"two", op, kFloatsInts, {X({4, 6}), X({4, 6})}});
    // Three or more inputs run on the CPU.
    v.push_back({"three_bcast", op, kFloatsInts, {X({2, 3, 4}), X({4}), X({3, 1})}, {}, 1, 18, "", Expect::kDecline});
    v.push_back({"one", op, kFloats, {X({5, 2})}});
  }
}

void unary(std::vector<Case>& v) {
  for (const char* op : {"Neg", "Abs", "Reciprocal", "Exp", "Tanh", "Erf", "Sigmoid", "Relu", "Softplus", "Sin", "Cos",
                         "Floor", "Ceil", "Round", "Softsign", "Elu", "HardSigmoid", "HardSwish"})
    v.push_back({"basic", op, kFloats, {X({3, 33})}});
  const std::string ms = "com.microsoft";
  v.push_back({"basic", "Gelu", kFloats, {X({4, 65})}, {}, 1, 1, ms});
  v.push_back({"bias", "FastGelu", kFloats, {X({4, 65}), X({65})}, {}, 1, 1, ms});
  v.push_back({"no_bias", "FastGelu", kFloats, {X({4, 65})}, {}, 1, 1, ms});
  v.push_back({"bias", "BiasGelu", kFloats, {X({4, 65}), X({65})}, {}, 1, 1, ms});
  for (const char* op : {"Sqrt", "Log"}) v.push_back({"basic", op, kFloats, {Pos({3, 33})}});
  for (const char* op : {"Neg", "Abs"})
    v.push_back({"basic", op, kInts, {X({3, 33})}, {}, 1, 18, "", Expect::kMayFall});
  v.push_back({"big", "Exp", kFloats, {X({kBig})}});
  v.push_back({"big", "Relu", {D::kFloat32}, {X({kBig})}});
  v.push_back({"exact", "Gelu", kFloats, {X({4, 65})}, {}, 1, 20});
  v.push_back({"tanh", "Gelu", kFloats, {X({4, 65})}, {attr_string("approximate", "tanh")}, 1, 20});
  v.push_back({"default", "LeakyRelu", kFloats, {X({4, 17})}});
  v.push_back({"alpha", "LeakyRelu", kFloats, {X({4, 17})}, {attr_float("alpha", 0.3f)}});
  v.push_back({"both", "Clip", kFloats, {X({5, 9}), Scalar(-1), Scalar(1.5)}, {}, 1, 13});
  v.push_back({"max_only", "Clip", kFloats, {X({5, 9}), None(), Scalar(0.5)}, {}, 1, 13});
  v.push_back({"none", "Clip", kFloats, {X({5, 9})}, {}, 1, 13});
  v.push_back({"ints", "Clip", kInts, {X({5, 9}), Scalar(-3), Scalar(4)}, {}, 1, 13, "", Expect::kMayFall});
  v.push_back({"attrs", "Clip", kFloats, {X({5, 9})}, {attr_float("min", -0.5f), attr_float("max", 2.f)}, 1, 6});
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const std::vector<double> specials = {1.5, nan, -inf, -0.25, inf, nan, 0.0, -3};
  v.push_back({"specials", "IsNaN", kFloats, {Vals(kT, {8}, specials)}, {}, 1, 9});
  v.push_back({"random", "IsNaN", kFloats, {X({5, 33})}, {}, 1, 9});
  v.push_back({"specials", "IsInf", kFloats, {Vals(kT, {8}, specials)}, {}, 1, 10});
  v.push_back({"positive", "IsInf", kFloats, {Vals(kT, {8}, specials)}, {attr_int("detect_negative", 0)}, 1, 10});
  v.push_back({"negative", "IsInf", kFloats, {Vals(kT, {8}, specials)}, {attr_int("detect_positive", 0)}, 1, 10});
}

void casts(std::vector<Case>& v) {
  for (D from : kAll)
    for (D to : kAll) {
      std::string name = cat("to_", dtype_name(to));
      // Values every type holds (bf16 rounds them, identically on both sides).
      // Floats carry fractions (truncation toward zero); integers include zeros (false).
      In x = from == D::kBool      ? Bools({7, 13})
             : is_float_like(from) ? Uni({7, 13}, -100, 100)
                                   : Uni({7, 13}, -1000, 1000);
      v.push_back({name, "Cast", {from}, {x}, {attr_int("to", static_cast<int64_t>(to))}, 1, 19});
    }
  v.push_back({"to_float16", "CastLike", {D::kFloat32}, {X({5, 6}), X({1}, D::kFloat16)}, {}, 1, 19});
  v.push_back({"to_int64", "CastLike", {D::kBFloat16}, {Uni({5, 6}, -50, 50), X({1}, D::kInt64)}, {}, 1, 19});
  v.push_back({"big_to_float16",
               "Cast",
               {D::kFloat32},
               {X({kBig})},
               {attr_int("to", static_cast<int64_t>(D::kFloat16))},
               1,
               19});
}

void shapes(std::vector<Case>& v) {
  v.push_back({"bcast", "Expand", kAll, {X({3, 1}), I64({2, 3, 4})}});
  v.push_back({"rank_up", "Expand", kAll, {X({1, 5}), I64({4, 3, 1, 5})}});
  v.push_back({"smaller_shape", "Expand", {D::kFloat32}, {X({2, 3, 4}), I64({3, 1})}});
  // Grouped-query attention's repeated KV heads: rows of whole 16-byte units move as units.
  v.push_back({"kv_heads", "Expand", kAll, {X({2, 2, 1, 5, 8}), I64({2, 2, 3, 5, 8})}});
  v.push_back({"kv_heads_wide", "Expand", kAll, {X({1, 2, 1, 3, 16}), I64({2, 2, 4, 3, 16})}});
  v.push_back({"up", "Range", {D::kFloat32}, {Scalar(-3.25), Scalar(40), Scalar(0.5)}, {}, 1, 11});
  v.push_back({"down", "Range", {D::kFloat32}, {Scalar(10), Scalar(-7), Scalar(-1.5)}, {}, 1, 11});
  v.push_back({"up", "Range", kInts, {Scalar(-7), Scalar(300), Scalar(3)}, {}, 1, 11});
  v.push_back({"down", "Range", kInts, {Scalar(5), Scalar(-20), Scalar(-4)}, {}, 1, 11});
  v.push_back({"big", "Range", {D::kInt64}, {Scalar(0), Scalar(static_cast<double>(kBig)), Scalar(1)}, {}, 1, 11});
}

void reductions(std::vector<Case>& v) {
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"}) {
    for (int keep : {1, 0}) {
      std::string k = cat("keep", keep);
      v.push_back(
          {"attr_mid_" + k, op, kFloats, {X({4, 5, 6})}, {attr_ints("axes", {1}), attr_int("keepdims", keep)}, 1, 11});
      v.push_back({"attr_outer_" + k,
                   op,
                   kFloats,
                   {X({4, 5, 6})},
                   {attr_ints("axes", {0, -1}), attr_int("keepdims", keep)},
                   1,
                   11});
      // One output: a sum of 120 terms, which cancellation can make far smaller than the terms,
      // while float32 summation's error follows their magnitudes (~n eps sum|x|): relative to the
      // output alone, 1e-5 failed now and then (|mean| 9e-4, an error of 1.2e-8).
      const bool sums = std::string(op) == "ReduceSum" || std::string(op) == "ReduceMean";
      v.push_back({"attr_all_" + k, op, kFloats, {X({4, 5, 6})}, {attr_int("keepdims", keep)}, 1, 11, "",
                   Expect::kRun, sums ? 1e-3 : 1e-5});
      // With axes as an input their values live on the device: the shapes tell the reduced axes,
      // with keepdims=0 only when no two axes longer than 1 have one length (else the kernel
      // reads the axes on the device).
      v.push_back({"input_last_" + k, op, kFloats, {X({3, 4, 50}), I64({-1})}, {attr_int("keepdims", keep)}, 1, 18});
      v.push_back({"input_mid_" + k, op, kFloats, {X({3, 4, 50}), I64({1})}, {attr_int("keepdims", keep)}, 1, 18});
      v.push_back(
          {"input_two_ones_" + k, op, kFloats, {X({1, 6, 1, 5}), I64({0, 3})}, {attr_int("keepdims", keep)}, 1, 18});
      v.push_back({"input_equal_lengths_" + k, op, kFloats, {X({4, 4, 3}), I64({1})}, {attr_int("keepdims", keep)}, 1,
                   18});
      v.push_back({"input_equal_lengths_neg_two_" + k, op, kFloats, {X({5, 3, 5, 3}), I64({-1, 0})},
                   {attr_int("keepdims", keep)}, 1, 18});
    }
    v.push_back({"long_rows", op, kFloats, {X({8, 4096})}, {attr_ints("axes", {-1})}, 1, 11});
    // onnxruntime-genai's sequence lengths: the int64 mask [batch, length] summed over axis 1 (batch == length here).
    v.push_back(
        {"mask_lengths", op, {D::kInt64, D::kInt32}, {Uni({6, 6}, 0, 1), I64({1})}, {attr_int("keepdims", 0)}, 1, 18});
    v.push_back({"long_cols", op, {D::kFloat32}, {X({3000, 7})}, {attr_ints("axes", {0})}, 1, 11});
  }
}

void softmax(std::vector<Case>& v) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    v.push_back({"last", op, kFloats, {X({6, 33})}, {}, 1, 13});
    v.push_back({"middle", op, kFloats, {X({2, 5, 7})}, {attr_int("axis", 1)}, 1, 13});
    v.push_back({"first", op, kFloats, {X({9, 4, 3})}, {attr_int("axis", -3)}, 1, 13});
    v.push_back({"row4096", op, kFloats, {Uni({16, 4096}, -8, 8)}, {}, 1, 13});
  }
}

void norms(std::vector<Case>& v) {
  const std::string ms = "com.microsoft";
  v.push_back({"bias", "LayerNormalization", kFloats, {X({4, 6, 64}), X({64}), X({64})}, {}, 1, 17});
  v.push_back({"no_bias", "LayerNormalization", kFloats, {X({4, 6, 64}), X({64})}, {}, 1, 17});
  v.push_back({"stats", "LayerNormalization", kFloats, {X({4, 6, 64}), X({64}), X({64})}, {}, 3, 17});
  v.push_back({"axis1_stats", "LayerNormalization", kFloats, {X({3, 5, 40}), X({5, 40}), X({5, 40})},
               {attr_int("axis", 1), attr_float("epsilon", 1e-3f)}, 3, 17});
  v.push_back({"wide", "LayerNormalization", kFloats, {X({8, 4096}), X({4096}), X({4096})}, {}, 1, 17});
  v.push_back({"basic", "SimplifiedLayerNormalization", kFloats, {X({4, 6, 64}), X({64})}, {}, 1, 17});
  v.push_back({"inv_std",
               "SimplifiedLayerNormalization",
               kFloats,
               {X({4, 96}), X({96})},
               {attr_float("epsilon", 1e-6f)},
               2,
               17});
  v.push_back({"basic", "SimplifiedLayerNormalization", kFloats, {X({4, 6, 64}), X({64})}, {}, 1, 1, ms});
  v.push_back({"basic", "RMSNormalization", kFloats, {X({3, 5, 128}), X({128})}, {}, 1, 23});
  // The skip norms are registered in the default domain too (as exporters name them).
  v.push_back({"default_domain", "SkipLayerNormalization", kFloats, {X({2, 5, 64}), X({2, 5, 64}), X({64}), X({64})},
               {}, 1, 1});
  v.push_back({"default_domain", "SkipSimplifiedLayerNormalization", kFloats, {X({2, 5, 64}), X({2, 5, 64}), X({64})},
               {}, 1, 1});
  v.push_back({"axis1", "RMSNormalization", kFloats, {X({3, 5, 16}), X({5, 16})}, {attr_int("axis", 1)}, 1, 23});
  v.push_back({"full", "SkipLayerNormalization", kFloats, {X({2, 5, 64}), X({2, 5, 64}), X({64}), X({64}), X({64})},
               {}, 4, 1, ms});
  v.push_back({"no_bias", "SkipLayerNormalization", kFloats, {X({2, 5, 64}), X({2, 5, 64}), X({64}), X({64})}, {}, 1,
               1, ms});
  v.push_back({"bcast_skip", "SkipLayerNormalization", kFloats, {X({2, 5, 64}), X({5, 64}), X({64}), X({64})}, {}, 1,
               1, ms, Expect::kMayFall});
  v.push_back({"full", "SkipSimplifiedLayerNormalization", kFloats, {X({2, 5, 64}), X({2, 5, 64}), X({64}), X({64})},
               {}, 4, 1, ms});
  v.push_back({"no_bias", "SkipSimplifiedLayerNormalization", kFloats, {X({2, 5, 64}), X({2, 5, 64}), X({64})}, {}, 1,
               1, ms});
}

void data(std::vector<Case>& v) {
  v.push_back({"axis0_i64", "Gather", kAll, {X({5, 4, 3}), Ints({2, 3}, -5, 4, D::kInt64)}});
  v.push_back({"axis1_i32", "Gather", kAll, {X({5, 4, 3}), Ints({7}, -4, 3, D::kInt32)}, {attr_int("axis", 1)}});
  v.push_back({"scalar_index", "Gather", {D::kFloat32}, {X({6, 9}), Vals(D::kInt64, {}, {-2})}, {attr_int("axis", 1)}});
  v.push_back({"rows", "Gather", kFloats, {X({1000, 256}), Ints({64}, -1000, 999, D::kInt64)}});
  v.push_back({"two", "Concat", kAll, {X({2, 3, 4}), X({2, 5, 4})}, {attr_int("axis", 1)}});
  v.push_back({"three_last", "Concat", kAll, {X({3, 2}), X({3, 1}), X({3, 7})}, {attr_int("axis", -1)}});
  {
    std::vector<In> twenty;
    for (int i = 0; i < 20; ++i) twenty.push_back(X({1 + i % 3, 6}));
    v.push_back({"twenty", "Concat", kAll, twenty, {attr_int("axis", 0)}});
  }
  v.push_back({"equal", "Split", kAll, {X({6, 4})}, {attr_int("axis", 0)}, 3, 13});
  v.push_back({"uneven_input", "Split", kAll, {X({4, 6}), I64({1, 2, 3})}, {attr_int("axis", 1)}, 3, 13});
  v.push_back({"num_outputs", "Split", kAll, {X({2, 7, 3})}, {attr_int("axis", 1), attr_int("num_outputs", 3)}, 3, 18});
  v.push_back({"simple", "Slice", kAll, {X({5, 8}), I64({1}), I64({4}), I64({1})}, {}, 1, 13});
  v.push_back({"neg_steps", "Slice", kAll,
               {X({6, 8, 5}), I64({-1, 0}), I64({-100, 5}), I64({0, 2}), I64({-2, 2})}, {}, 1, 13});
  v.push_back({"neg_axes", "Slice", kAll, {X({4, 6, 8}), I64({1, -3}), I64({100, -1}), I64({-2, -1})}, {}, 1, 13});
  v.push_back({"2d", "Tile", kAll, {X({2, 3}), I64({2, 2})}, {}, 1, 13});
  v.push_back({"3d_ones", "Tile", kAll, {X({1, 4, 1}), I64({3, 1, 5})}, {}, 1, 13});
  v.push_back({"perm0213", "Transpose", kAll, {X({2, 3, 4, 5})}, {attr_ints("perm", {0, 2, 1, 3})}});
  v.push_back({"perm10", "Transpose", kAll, {X({64, 33})}, {attr_ints("perm", {1, 0})}});
  v.push_back({"perm3102", "Transpose", kAll, {X({2, 3, 4, 5})}, {attr_ints("perm", {3, 1, 0, 2})}});
  v.push_back({"default", "Transpose", {D::kFloat32}, {X({3, 4, 5})}});
  v.push_back({"big", "Transpose", {D::kFloat32}, {X({1024, 1027})}, {attr_ints("perm", {1, 0})}});
}

void genai_ops(std::vector<Case>& v) {
  const std::string g = "onyx.genai";
  v.push_back(
      {"decode", "CacheUpdate", kAll, {X({2, 3, 8, 4}), X({2, 3, 1, 4}), Vals(D::kInt64, {}, {5})}, {}, 1, 1, g});
  v.push_back(
      {"prompt", "CacheUpdate", kAll, {X({1, 2, 16, 8}), X({1, 2, 7, 8}), Vals(D::kInt64, {}, {0})}, {}, 1, 1, g});
  v.push_back(
      {"last", "CacheUpdate", kFloats, {X({3, 2, 9, 5}), X({3, 2, 2, 5}), Vals(D::kInt64, {}, {7})}, {}, 1, 1, g});
  // One position per row (serving's slots, each at its own length).
  v.push_back({"per_row",
               "CacheUpdate",
               kAll,
               {X({3, 2, 9, 4}), X({3, 2, 1, 4}), Vals(D::kInt64, {3}, {0, 8, 4})},
               {},
               1,
               1,
               g});
  v.push_back({"per_row_chunk",
               "CacheUpdate",
               kFloats,
               {X({2, 2, 9, 5}), X({2, 2, 3, 5}), Vals(D::kInt64, {2}, {6, 1})},
               {},
               1,
               1,
               g});
  // Sample: per row temperature, top_k, top_p, min_p, repetition, presence and frequency
  // penalties; (seed, counter); history; position; generated_start.
  const D f32 = D::kFloat32, i64 = D::kInt64;
  v.push_back({"greedy", "Sample", kFloats,
               {X({3, 1, 1000}), Vals(f32, {3, 7}, {0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0}),
                Vals(i64, {3, 2}, {1, 0, 2, 0, 3, 0})}, {}, 2, 1, g});
  v.push_back({"mixed_rows",
               "Sample",
               kFloats,
               {X({3, 4, 777}), Vals(f32, {3, 7}, {0.7, 40, 1, 0,        1,  0,   0,    /**/ 1.3, 0, 0.9, 0,
                                                   1.2, 0,  0, /**/ 1.0, 20, 0.8, 0.05, 1.1,      0, 0}),
                Vals(i64, {3, 2}, {11, 5, 12, 9, 13, 100}), Ints({3, 6}, 0, 776, i64), Vals(i64, {3}, {3, 1, 0})},
               {},
               2,
               1,
               g});
  v.push_back({"greedy_penalty", "Sample", kFloats,
               {X({2, 2, 5000}), Vals(f32, {2, 7}, {0, 0, 1, 0, 1.5, 0, 0, /**/ 0, 0, 1, 0, 0.8, 0, 0}),
                Vals(i64, {2, 2}, {0, 0, 0, 0}), Ints({2, 30}, 0, 4999, i64)},
               {}, 2, 1, g});
  // Presence and frequency: histories of ids drawn from a few (so that they repeat; -1 among
  // them), split by generated_start anywhere (0, inside, past the end, negative), so that the
  // counts decide the greedy token of a small vocabulary, and move the mass a draw walks.
  v.push_back({"greedy_counts", "Sample", kFloats,
               {X({4, 1, 64}),
                Vals(f32, {4, 7}, {0, 0, 1, 0, 1, 1.5, 0, /**/ 0, 0, 1, 0, 1, 0, 1.2, /**/ 0, 0, 1, 0, 1.3, 0.7, 0.9,
                                   /**/ 0, 0, 1, 0, 1, -1.5, -0.5}),
                Vals(i64, {4, 2}, {0, 0, 0, 0, 0, 0, 0, 0}), Ints({4, 40}, -1, 63, i64), None(),
                Vals(i64, {4}, {0, 17, 39, -3})},
               {}, 2, 1, g});
  v.push_back({"sampled_counts", "Sample", kFloats,
               {X({3, 2, 1000}),
                Vals(f32, {3, 7}, {1.0, 0, 1, 0, 1, 0.8, 1.5, /**/ 0.7, 50, 0.9, 0.02, 1.2, 1.0, 0.5,
                                   /**/ 1.5, 0, 1, 0, 1, 0, 2}),
                Vals(i64, {3, 2}, {21, 3, 22, 4, 23, 5}), Ints({3, 96}, -1, 200, i64), Vals(i64, {3}, {1, 0, 1}),
                Vals(i64, {3}, {10, 50, 0})},
               {}, 2, 1, g});
  // No generated_start: every entry counts.
  v.push_back({"counts_all_history",
               "Sample",
               kFloats,
               {X({4, 1, 300}), Vals(f32, {4, 7}, {0,        0,   1,   0,      1, 0.6, 0.8, /**/ 1.1, 10,  1,   0,
                                                   1,        0.3, 1.7, /**/ 0, 0, 1,   0,   1,        1.2, 0.5,
                                                   /**/ 0.8, 0,   1,   0,      1, 0,   1.9}),
                Vals(i64, {4, 2}, {7, 1, 8, 2, 9, 3, 10, 4}), Ints({4, 50}, -1, 120, i64), None()},
               {},
               2,
               1,
               g});
  // More history than vocabulary (the counts by rank are min(H, V) long).
  v.push_back({"history_longer_than_vocab", "Sample", kFloats,
               {X({2, 1, 50}), Vals(f32, {2, 7}, {0, 0, 1, 0, 1, 0.3, 0.4, /**/ 1.2, 0, 1, 0, 1, 0.1, 0.3}),
                Vals(i64, {2, 2}, {5, 6, 7, 8}), Ints({2, 300}, -1, 49, i64), None(), Vals(i64, {2}, {120, 0})},
               {}, 2, 1, g});
  // A Llama 3 vocabulary and a long history: more shared memory than a block gets unasked.
  v.push_back({"big_vocab_long_history", "Sample", {D::kFloat32, D::kBFloat16},
               {X({2, 1, 128256}), Vals(f32, {2, 7}, {0, 0, 1, 0, 1.1, 0.5, 1, /**/ 1, 0, 1, 0, 1.05, 0.2, 2}),
                Vals(i64, {2, 2}, {1, 1, 2, 2}), Ints({2, 9000}, -1, 3000, i64), None(), Vals(i64, {2}, {4000, 0})},
               {}, 2, 1, g});
  // A Llama 3 vocabulary without penalties, as generation runs it: integer logits, so that the
  // largest value repeats and the first of its indices must win; the logits read are an output.
  v.push_back({"greedy_big_vocab_ties", "Sample", kFloats,
               {Ints({3, 1, 128256}, -40, 40), Vals(f32, {3, 7}, {0, 0, 1, 0, 1, 0, 0, /**/ 0, 0, 1, 0, 1, 0, 0,
                                                                 /**/ 0, 0, 1, 0, 1, 0, 0}),
                Vals(i64, {3, 2}, {1, 0, 2, 0, 3, 0})}, {}, 2, 1, g});
  // Top-k and top-p over the same vocabulary (their thresholds found by passes over the row),
  // at two positions of an odd row length (rows not aligned to 16 bytes).
  v.push_back({"sampled_big_vocab", "Sample", kFloats,
               {X({2, 2, 128255}), Vals(f32, {2, 7}, {0.8, 50, 0.9, 0, 1, 0, 0, /**/ 1.0, 0, 0.95, 0.01, 1, 0, 0}),
                Vals(i64, {2, 2}, {31, 7, 32, 8}), None(), Vals(i64, {2}, {0, 1})}, {}, 2, 1, g});
  // Nearly flat logits over the same vocabulary: the tokens inside the thresholds' range stay
  // more than the shared-memory pool holds, so the passes keep reading the row.
  v.push_back({"sampled_flat_big_vocab", "Sample", kFloats,
               {Uni({2, 1, 128256}, 1.0, 1.01), Vals(f32, {2, 7}, {1.0, 1000, 0.5, 0, 1, 0, 0, /**/ 1.0, 0, 0.3, 0, 1, 0, 0}),
                Vals(i64, {2, 2}, {41, 2, 42, 3})}, {}, 2, 1, g});
  // Rows split over clusters of 6 and 16 blocks (slices of 1,024 tokens or more, the last one
  // shorter), with penalties, top-k, top-p and min-p: every threshold and the draw cross slices.
  v.push_back({"sampled_cluster_slices", "Sample", kFloats,
               {X({3, 2, 6007}), Vals(f32, {3, 7}, {0.9, 300, 0.8, 0, 1.1, 0.4, 0.6, /**/ 1.2, 0, 0.97, 0.001, 1, 0, 0,
                                                   /**/ 0.7, 2000, 1, 0, 1.3, 0, 1.5}),
                Vals(i64, {3, 2}, {51, 1, 52, 2, 53, 3}), Ints({3, 40}, -1, 6006, i64), Vals(i64, {3}, {1, 0, 1}),
                Vals(i64, {3}, {5, 0, 39})}, {}, 2, 1, g});
  v.push_back({"sampled_cluster_of_16", "Sample", kFloats,
               {X({2, 1, 16383}), Vals(f32, {2, 7}, {1.0, 0, 0.9, 0, 1, 0, 0, /**/ 0.6, 100, 0.95, 0, 1, 0, 0}),
                Vals(i64, {2, 2}, {61, 4, 62, 5})}, {}, 2, 1, g});
  v.push_back({"fill_f32", "ConstantOfShape", {D::kFloat32}, {Vals(D::kInt64, {3}, {2, 3, 5})},
               {attr_tensor("value", Tensor::from_vector<float>({-2.5f}, Shape{1}))}, 1, 9});
  v.push_back({"fill_i64", "ConstantOfShape", {D::kFloat32}, {Vals(D::kInt64, {2}, {4, 7})},
               {attr_tensor("value", Tensor::from_vector<int64_t>({42}, Shape{1}))}, 1, 9});
  v.push_back({"default", "ConstantOfShape", {D::kFloat32}, {Vals(D::kInt64, {2}, {3, 3})}, {}, 1, 9});
}

void rotary(std::vector<Case>& v) {
  const std::string ms = "com.microsoft";
  // ONNX-23: X [B, H, S, D] with position_ids; 3-D X with num_heads, partial rotation,
  // interleaved; caches per (batch, position) without position_ids.
  v.push_back({"pos_ids", "RotaryEmbedding", kFloats,
               {X({2, 4, 6, 16}), Uni({10, 8}, -1, 1), Uni({10, 8}, -1, 1), Ints({2, 6}, 0, 9, D::kInt64)}, {}, 1,
               23});
  v.push_back({"3d_partial_interleaved", "RotaryEmbedding", kFloats,
               {X({2, 6, 64}), Uni({10, 4}, -1, 1), Uni({10, 4}, -1, 1), Ints({2, 6}, 0, 9, D::kInt64)},
               {attr_int("num_heads", 4), attr_int("rotary_embedding_dim", 8), attr_int("interleaved", 1)}, 1, 23});
  v.push_back({"no_pos_ids", "RotaryEmbedding", kFloats,
               {X({2, 3, 5, 8}), Uni({2, 5, 4}, -1, 1), Uni({2, 5, 4}, -1, 1)}, {}, 1, 23});
  v.push_back({"ms_pos_ids", "RotaryEmbedding", kFloats,
               {X({2, 6, 64}), Ints({2, 6}, 0, 15, D::kInt64), Uni({16, 8}, -1, 1), Uni({16, 8}, -1, 1)},
               {attr_int("num_heads", 4)}, 1, 1, ms});
  v.push_back({"ms_offset_interleaved", "RotaryEmbedding", kFloats,
               {X({1, 5, 2, 16}), Vals(D::kInt64, {1}, {3}), Uni({16, 8}, -1, 1), Uni({16, 8}, -1, 1)},
               {attr_int("interleaved", 1)}, 1, 1, ms});
}

// com.microsoft GroupQueryAttention, MatMulNBits and GatherBlockQuantized (onnxruntime-genai's
// builder models) and MultiHeadAttention (Optimum's exports).
void contrib(std::vector<Case>& v) {
  const std::string ms = "com.microsoft";
  const D i32 = D::kInt32;
  auto heads = [](int64_t n, int64_t kv) {
    return std::vector<Attribute>{attr_int("num_heads", n), attr_int("kv_num_heads", kv)};
  };
  auto with = [](std::vector<Attribute> a, std::vector<Attribute> more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  const std::vector<Attribute> rot = {attr_int("do_rotary", 1)};
  auto gqa = [&](std::string name, std::vector<In> in, std::vector<Attribute> at, Expect e = Expect::kRun) {
    Case c{std::move(name), "GroupQueryAttention", kFloats, std::move(in), std::move(at), 3, 1, ms, e};
    c.f32_tol = 1e-4;
    v.push_back(std::move(c));
  };
  // Decode, batch 3 (rows at different lengths), 4 query heads on 2 KV heads of 32, a separate present.
  gqa("decode", {X({3, 1, 128}), X({3, 1, 64}), X({3, 1, 64}), X({3, 2, 16, 32}), X({3, 2, 16, 32}),
                 Vals(i32, {3}, {9, 15, 0}), Vals(i32, {1}, {16})}, heads(4, 2));
  // Decode past a past shorter than total (present grows), with rotary from per-row positions.
  gqa("decode_grow_rotary_pos_ids",
      {X({2, 1, 256}), X({2, 1, 64}), X({2, 1, 64}), X({2, 1, 11, 64}), X({2, 1, 11, 64}), Vals(i32, {2}, {11, 6}),
       Vals(i32, {1}, {12}), Uni({40, 32}, -1, 1), Uni({40, 32}, -1, 1), Ints({2, 1}, 0, 39, D::kInt64)},
      with(heads(4, 1), rot));
  // A first prompt of a right-padded batch into a shared-size cache: packed QKV, rotary (partial, interleaved).
  gqa("prompt_packed_rotary_interleaved",
      {X({2, 7, 6 * 16}), None(), None(), X({2, 2, 12, 16}), X({2, 2, 12, 16}), Vals(i32, {2}, {6, 3}),
       Vals(i32, {1}, {7}), Uni({20, 4}, -1, 1), Uni({20, 4}, -1, 1)},
      with(heads(2, 2), {attr_int("do_rotary", 1), attr_int("rotary_interleaved", 1)}));
  // A chunk after a past (batch 1), a head size of 80 (not a multiple of 32), softcap and a local window.
  gqa("chunk_softcap_window_h80",
      {X({1, 5, 160}), X({1, 5, 80}), X({1, 5, 80}), X({1, 1, 20, 80}), X({1, 1, 20, 80}), Vals(i32, {1}, {17}),
       Vals(i32, {1}, {20})},
      with(heads(2, 1), {attr_float("softcap", 2.5f), attr_int("local_window_size", 6), attr_float("scale", 0.3f)}));
  // No past; attention_bias, head_sink; non-causal.
  gqa("bias_sink_noncausal",
      {X({2, 4, 64}), X({2, 4, 32}), X({2, 4, 32}), None(), None(), Vals(i32, {2}, {3, 3}), Vals(i32, {1}, {4}),
       None(), None(), None(), Uni({2, 1, 4, 4}, -2, 2), Uni({4}, -1, 1)},
      with(heads(4, 2), {attr_int("causal", 0)}));
  gqa("smooth_softmax_decode",
      {X({1, 1, 64}), X({1, 1, 64}), X({1, 1, 64}), X({1, 1, 9, 64}), X({1, 1, 9, 64}), Vals(i32, {1}, {8}),
       Vals(i32, {1}, {9})},
      with(heads(1, 1), {attr_int("smooth_softmax", 1)}));
  // A window cache (sliding_window_cache=1, onnxruntime-genai's Gemma 2), whose rows hold the last
  // positions (ops/gqa.h, window_cache_held). A decode step of 2 rows in a cache of 8 for a window
  // of 5: row 0 reaches 9 positions, so 4 leave at once and the rest move to the front; row 1
  // (4 positions) still fills it. Rotated keys; present separate, then past's own buffer.
  const std::vector<std::pair<int, int>> in_place = {{1, 3}, {2, 4}};
  auto window = [&](int64_t w) {
    return std::vector<Attribute>{attr_int("local_window_size", w), attr_int("sliding_window_cache", 1)};
  };
  const std::vector<In> window_decode = {X({2, 1, 128}), X({2, 1, 64}), X({2, 1, 64}), X({2, 2, 8, 32}),
                                         X({2, 2, 8, 32}), Vals(i32, {2}, {8, 3}), Vals(i32, {1}, {9}),
                                         Uni({16, 16}, -1, 1), Uni({16, 16}, -1, 1)};
  gqa("window_cache_decode", window_decode, with(with(heads(4, 2), rot), window(5)));
  gqa("window_cache_decode_in_place", window_decode, with(with(heads(4, 2), rot), window(5)));
  v.back().alias = in_place;
  // One row past a full cache of 24 for a window of 22: 3 positions leave and 21 move, in chunks
  // of 8 rows (head size 256) that overlap their own reads, in place.
  gqa("window_cache_move_in_place_h256",
      {X({1, 1, 512}), X({1, 1, 256}), X({1, 1, 256}), X({1, 1, 24, 256}), X({1, 1, 24, 256}), Vals(i32, {1}, {24}),
       Vals(i32, {1}, {25})},
      with(heads(2, 1), window(22)));
  v.back().alias = in_place;
  // A chunk of 6 after 8 positions (14 in all) with a soft cap: the window keeps the chunk's own
  // 6, and its first queries read past positions that leave the cache in this step. In place.
  gqa("window_cache_chunk_softcap_in_place",
      {X({1, 6, 64}), X({1, 6, 32}), X({1, 6, 32}), X({1, 1, 8, 32}), X({1, 1, 8, 32}), Vals(i32, {1}, {13}),
       Vals(i32, {1}, {14}), Uni({20, 16}, -1, 1), Uni({20, 16}, -1, 1)},
      with(with(heads(2, 1), rot), with(window(5), {attr_float("softcap", 3.f)})));
  v.back().alias = in_place;
  // A first prompt of 12 longer than its cache of 8 (window 4): present keeps its last 7; packed
  // query, rotary by position_ids.
  gqa("window_cache_first_prompt_packed",
      {X({1, 12, 4 * 32}), None(), None(), X({1, 1, 8, 32}), X({1, 1, 8, 32}), Vals(i32, {1}, {11}),
       Vals(i32, {1}, {12}), Uni({40, 16}, -1, 1), Uni({40, 16}, -1, 1), Ints({1, 12}, 0, 23, D::kInt64)},
      with(with(heads(2, 1), rot), window(4)));
  // On the CPU only: query_seqlens, heads over 256.
  gqa("head_512",
      {X({1, 1, 512}), X({1, 1, 512}), X({1, 1, 512}), X({1, 1, 4, 512}), X({1, 1, 4, 512}), Vals(i32, {1}, {3}),
       Vals(i32, {1}, {4})},
      heads(1, 1), Expect::kDecline);

  // ONNX Attention (opset 23), as the attention fusion makes it: 4-D, grouped-query heads.
  auto attn = [&](std::string name, std::vector<In> in, std::vector<Attribute> at, Expect e = Expect::kRun) {
    Case c{std::move(name), "Attention", kFloats, std::move(in), std::move(at), 1, 23, "", e};
    c.f32_tol = 1e-4;
    v.push_back(std::move(c));
  };
  // Decode: 8 query heads on 2 KV heads, 300 keys (split across blocks), an additive mask [B, 1, 1, T].
  attn("decode_gqa_split_mask", {X({2, 8, 1, 64}), X({2, 2, 300, 64}), X({2, 2, 300, 64}), Uni({2, 1, 1, 300}, -4, 0)},
       {attr_float("scale", 0.125f)});
  // A long past at batch 1: 2 KV heads x 2000 keys, split 16 ways (a cluster past 8 blocks).
  attn("decode_long_split16", {X({1, 4, 1, 64}), X({1, 2, 2000, 64}), X({1, 2, 2000, 64}), Uni({1, 1, 1, 2000}, -3, 0)},
       {attr_float("scale", 0.125f)});
  // The 16-bit decode kernel (at most 8 rows per KV head, head size 64 or 128): 8 heads per KV head
  // at 8191 keys (16 splits), head size 128 with a bool mask and a mask shorter than the keys, two
  // positions of 4 heads (8 rows) with a per-head mask, one row per KV head, a few keys (one split,
  // fewer keys than one warp's loads), no mask.
  attn("decode_g8_long_8191", {X({1, 8, 1, 64}), X({1, 1, 8191, 64}), X({1, 1, 8191, 64}), Uni({1, 1, 1, 8191}, -3, 0)},
       {attr_float("scale", 0.125f)});
  attn("decode_h128_bool_short", {X({2, 4, 1, 128}), X({2, 2, 700, 128}), X({2, 2, 700, 128}), Bools({2, 1, 1, 650})},
       {attr_float("scale", 0.09f)});
  attn("decode_l2_rows8_mask_per_head",
       {X({1, 8, 2, 64}), X({1, 2, 513, 64}), X({1, 2, 513, 64}), Uni({1, 8, 2, 513}, -2, 0)},
       {attr_float("scale", 0.125f)});
  // A bool mask of its own per head and batch row at 4 rows per KV head (each step's keys partly
  // masked, in every row differently), past 64 keys per split.
  attn("decode_bool_per_head_rows4", {X({2, 8, 1, 64}), X({2, 2, 400, 64}), X({2, 2, 400, 64}), Bools({2, 8, 1, 400})},
       {attr_float("scale", 0.125f)});
  // Both forms of the decode kernel at 4 rows per KV head: the short one (up to 8 splits leave
  // each warp at most two steps; here head size 128, a bool mask) and the long one (the 1.24B
  // Llama's batch 8: 64 KV heads in all, 2 splits of 300 keys).
  attn("decode_rows4_h128_short_form", {X({1, 4, 1, 128}), X({1, 1, 200, 128}), X({1, 1, 200, 128}), Bools({1, 1, 1, 200})},
       {attr_float("scale", 0.09f)});
  attn("decode_rows4_long_form", {X({8, 32, 1, 64}), X({8, 8, 600, 64}), X({8, 8, 600, 64}), Uni({8, 1, 1, 600}, -3, 0)},
       {attr_float("scale", 0.125f)});
  // 8 rows of head size 128 split over 3000 keys: the first block's gathering space past 48 KiB
  // of shared memory with the kernel's own (a launch that needs the kernel's attribute raised).
  attn("decode_rows8_h128_split", {X({1, 8, 1, 128}), X({1, 1, 3000, 128}), X({1, 1, 3000, 128}), Uni({1, 1, 1, 3000}, -3, 0)},
       {attr_float("scale", 0.09f)});
  attn("decode_rows1_few_keys", {X({3, 2, 1, 64}), X({3, 2, 5, 64}), X({3, 2, 5, 64})}, {attr_float("scale", 0.125f)});
  // Gemma 2's soft cap (cap * tanh(score / cap) before the mask), scores large enough that it bends
  // them: the decode kernel's short form (4 rows a KV head), the direct kernel (head size 80) and,
  // below, the long prompt's path.
  attn("decode_softcap_rows4", {X({1, 8, 1, 64}), X({1, 2, 300, 64}), X({1, 2, 300, 64}), Uni({1, 1, 1, 300}, -3, 0)},
       {attr_float("scale", 0.5f), attr_float("softcap", 1.5f)});
  attn("chunk_softcap_h80", {X({1, 4, 5, 80}), X({1, 1, 37, 80}), X({1, 1, 37, 80}), Bools({5, 37})},
       {attr_float("softcap", 0.7f)});
  // A prompt chunk: 5 queries, head size 80, no mask, the default scale, one KV head for 4 query heads.
  attn("chunk_h80_default_scale", {X({1, 4, 5, 80}), X({1, 1, 37, 80}), X({1, 1, 37, 80})}, {});
  // Many rows per block (64 queries x 2 heads), a bool mask [L, T] broadcast over batch and heads,
  // a mask shorter than the keys (the rest masked), head size 128.
  attn("prefill_bool_mask_short_h128", {X({1, 2, 64, 128}), X({1, 2, 70, 128}), X({1, 2, 70, 128}), Bools({64, 66})},
       {attr_float("scale", 0.09f)});
  // A long prompt's path (G * L >= 128 rows per KV head): scores and values through cuBLASLt,
  // softmax by row; 2 query heads per KV head, 96 queries over 130 keys, an additive mask
  // [B, 1, L, T]; and a bool mask [L, T] shorter than the keys at batch 2. The scores are rounded
  // to the tensors' type there, as the unfused graph's MatMul rounds them, where the CPU
  // reference keeps them in float: in bfloat16 (8 significant bits, scores of tens) the outputs
  // differ by up to 2% of their largest (measured: 2.1% and 1.4%), so both 16-bit types get 3e-2
  // here (float16 measured within the usual 1e-2).
  {
    Case c{"prompt_gemm_additive", "Attention", kFloats,
           {X({1, 4, 96, 64}), X({1, 2, 130, 64}), X({1, 2, 130, 64}), Uni({1, 1, 96, 130}, -3, 0)},
           {attr_float("scale", 0.125f)}, 1, 23};
    c.f32_tol = 1e-4;
    c.f16_tol = 3e-2;
    v.push_back(c);
    c.name = "prompt_gemm_bool_short";
    c.inputs = {X({2, 2, 128, 32}), X({2, 2, 128, 32}), X({2, 2, 128, 32}), Bools({128, 100})};
    c.attrs = {attr_float("scale", 0.2f)};
    v.push_back(c);
    c.name = "prompt_gemm_softcap";
    c.inputs = {X({1, 4, 96, 64}), X({1, 2, 130, 64}), X({1, 2, 130, 64}), Uni({1, 1, 96, 130}, -3, 0)};
    c.attrs = {attr_float("scale", 0.4f), attr_float("softcap", 2.f)};
    v.push_back(c);
  }
  // Plain multi-head (no grouping), head size 16, a mask per head [B, H, L, T].
  attn("mha_h16_mask_per_head", {X({3, 2, 3, 16}), X({3, 2, 9, 16}), X({3, 2, 9, 16}), Uni({3, 2, 3, 9}, -2, 2)},
       {attr_float("scale", 0.3f)});
  // On the CPU only: is_causal, a past.
  attn("causal", {X({1, 2, 4, 32}), X({1, 2, 4, 32}), X({1, 2, 4, 32})}, {attr_int("is_causal", 1)}, Expect::kDecline);

  // The fused ops of the load-time fusions (src/ops/fused_ops.cpp).
  {
    Case c{"heads_bcast",
           "RotaryHalf",
           kFloats,
           {X({2, 4, 3, 64}), Uni({2, 1, 3, 64}, -1, 1), Uni({2, 1, 3, 64}, -1, 1)},
           {attr_int("split", 32)},
           1,
           1,
           "onyx"};
    v.push_back(c);
    c.name = "split_not_half";  // rotate_half by 5 of 12
    c.inputs = {X({3, 2, 12}), Uni({2, 12}, -1, 1), Uni({2, 12}, -1, 1)};
    c.attrs = {attr_int("split", 5)};
    v.push_back(c);
    // onyx::RotaryCache (src/ops/rotary_cache.cpp): q, k, v, cos, sin, past_k, past_v[, index]
    // -> q_rot, present_k, present_v[, k_rot]. Vector pairs (split = D / 2) and elements (split 5
    // of 12); GQA; past 0; a prompt's chunk with 2-D tables; the cache of fixed capacity with one
    // index and one per row; the decode step's shape at batch 8, past 511.
    auto rc = [&](std::string name, int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t P, int64_t D, int outs = 3,
                  Shape cos = {}, int64_t Dv = 0, std::vector<In> index = {}, int64_t split = 0) {
      if (cos.rank() == 0) cos = Shape{B, 1, S, D};
      if (Dv == 0) Dv = D;
      std::vector<In> in{X({B, Hq, S, D}), X({B, Hkv, S, D}), X({B, Hkv, S, Dv}), Uni(cos, -1, 1), Uni(cos, -1, 1),
                         X({B, Hkv, P, D}), X({B, Hkv, P, Dv})};
      in.insert(in.end(), index.begin(), index.end());
      v.push_back({std::move(name), "RotaryCache", kFloats, std::move(in), {attr_int("split", split ? split : D / 2)},
                   outs, 1, "onyx"});
    };
    rc("decode_h64_gqa", 2, 8, 2, 1, 13, 64);
    rc("decode_h128", 1, 4, 2, 1, 5, 128);
    rc("past0", 3, 4, 2, 1, 0, 64);
    rc("prompt_cos2d", 2, 4, 2, 7, 3, 64, 3, Shape{7, 64});
    rc("keys_out", 2, 8, 2, 1, 13, 64, 4);
    rc("elements_split5", 2, 2, 1, 3, 4, 12, 3, Shape{3, 12}, 10, {}, 5);
    rc("v_narrow", 2, 4, 2, 1, 6, 64, 3, {}, 32);
    rc("indexed", 2, 4, 2, 1, 16, 64, 3, {}, 0, {Vals(D::kInt64, {}, {9})});
    rc("indexed_per_row", 2, 4, 2, 1, 16, 128, 3, {}, 0, {Vals(D::kInt64, {2}, {3, 15})});
    rc("indexed_chunk_keys", 2, 4, 2, 3, 16, 64, 4, {}, 0, {Vals(D::kInt64, {2}, {0, 13})});
    rc("indexed_elements", 2, 2, 1, 1, 6, 12, 3, Shape{2, 1, 1, 12}, 10, {Vals(D::kInt64, {}, {5})}, 5);
    rc("llama_b8_past511", 8, 32, 8, 1, 511, 64);
    // onyx::RotaryCacheAttention (ops/rotary_cache.cpp): RotaryCache with its index, then Attention
    // over its outputs. Here the presents are fresh tensors, so its kernel runs the two kernels in
    // turn (test_rotary_cache_gpu.cpp binds them in place, where the fused kernel runs).
    auto rca = [&](std::string name, int64_t B, int64_t Hq, int64_t Hkv, int64_t S, int64_t C, int64_t D, In index,
                   In mask = None()) {
      std::vector<In> in{X({B, Hq, S, D}), X({B, Hkv, S, D}), X({B, Hkv, S, D}), Uni({B, 1, S, D}, -1, 1),
                         Uni({B, 1, S, D}, -1, 1), X({B, Hkv, C, D}), X({B, Hkv, C, D}), std::move(index)};
      if (mask.fill != Fill::kOmitted) in.push_back(std::move(mask));
      v.push_back({std::move(name), "RotaryCacheAttention", kFloats, std::move(in),
                   {attr_int("split", D / 2), attr_float("scale", 0.125f)}, 4, 1, "onyx"});
    };
    rca("copy_decode", 2, 8, 2, 1, 16, 64, Vals(D::kInt64, {}, {9}));
    rca("copy_per_row_bool_mask", 2, 4, 2, 1, 16, 128, Vals(D::kInt64, {2}, {3, 15}), Bools({2, 1, 1, 16}));
    rca("copy_chunk_additive_mask", 1, 4, 2, 3, 24, 64, Vals(D::kInt64, {}, {5}), Uni({1, 1, 3, 24}, -2, 0));
    Case m{"flat", "SiluMul", kFloats, {X({4, 1000}), X({4, 1000})}, {}, 1, 1, "onyx"};
    v.push_back(m);
    m.name = "bcast";
    m.inputs = {X({3, 1, 7}), X({5, 7})};
    v.push_back(m);
  }

  // MultiHeadAttention (Optimum's BERT, T5 and Whisper exports). Inputs: query, key, value,
  // bias, key_padding_mask, attention_bias, past_key, past_value; outputs: y (and present).
  auto mha = [&](std::string name, std::vector<In> in, std::vector<Attribute> at, int outputs = 1,
                 Expect e = Expect::kRun) {
    Case c{std::move(name), "MultiHeadAttention", kFloats, std::move(in), std::move(at), outputs, 1, ms, e};
    c.f32_tol = 1e-4;
    v.push_back(std::move(c));
  };
  auto nh = [](int64_t n, std::vector<Attribute> more = {}) {
    more.insert(more.begin(), attr_int("num_heads", n));
    return more;
  };
  const double inf = std::numeric_limits<double>::infinity();
  // Encoder self-attention: bias, a [B, T] padding mask of zeros and ones.
  mha("self_bias_mask2d", {X({2, 5, 64}), X({2, 5, 64}), X({2, 5, 64}), X({192}), Uni({2, 5}, 0, 1, i32)}, nh(4));
  // Longer: 64 tokens, head size 64, a [B] mask of valid key counts (0 and 64 among them).
  mha("bert_s64_mask1d",
      {X({3, 64, 256}), X({3, 64, 256}), X({3, 64, 256}), X({768}), Vals(i32, {3}, {64, 17, 0})}, nh(4));
  // Cross-attention on a BNSH key/value cache, a value head size unlike the key's (only the
  // query part of the bias applies), a [B] mask.
  mha("cross_bnsh_kv_hv24",
      {X({2, 3, 64}), X({2, 4, 7, 16}), X({2, 4, 7, 24}), X({224}), Uni({2}, 0, 7, i32)}, nh(4));
  // Cross-attention with 3-D key/value of another length, a head size of 80, a value head size
  // of 48 (the lanes partly used), per-head attention_bias, present of the new keys only.
  mha("cross_3d_h80_hv48_bias_present",
      {X({2, 4, 160}), X({2, 6, 160}), X({2, 6, 96}), X({416}), None(), Uni({2, 2, 4, 6}, -2, 2)}, nh(2), 3);
  // Decoder self-attention with a past: unidirectional, attention_bias broadcast over batch and
  // heads, present = concat(past, new + bias).
  mha("decoder_past_causal_present",
      {X({2, 3, 64}), X({2, 3, 64}), X({2, 3, 64}), X({192}), None(), Uni({1, 1, 3, 11}, -2, 2), X({2, 4, 8, 16}),
       X({2, 4, 8, 16})},
      nh(4, {attr_int("unidirectional", 1)}), 3);
  // A decode step: one token after 20, a [B, S, T] mask, the scale and mask_filter_value attributes,
  // attention_bias per batch row and broadcast over heads.
  mha("decode_past_mask3d_scale",
      {X({2, 1, 128}), X({2, 1, 128}), X({2, 1, 128}), None(), Uni({2, 1, 21}, 0, 1, i32), Uni({2, 1, 1, 21}, -1, 1),
       X({2, 2, 20, 64}), X({2, 2, 20, 64})},
      nh(2, {attr_float("scale", 0.2f), attr_float("mask_filter_value", -50.f)}), 3);
  // Keys left out by -inf in attention_bias: with unidirectional query 0 has none left (zeros),
  // queries 1 and 2 one each.
  mha("bias_minus_inf_rows_causal",
      {X({1, 3, 32}), X({1, 3, 32}), X({1, 3, 32}), None(), None(),
       Vals(kT, {1, 1, 3, 3}, {-inf, 0.5, -1, 0.25, -inf, 2, -inf, 1, -inf})},
      nh(1, {attr_int("unidirectional", 1)}));
  // On the CPU only: head sizes over 256.
  mha("head_512", {X({1, 1, 512}), X({1, 2, 512}), X({1, 2, 512})}, nh(1), 1, Expect::kDecline);

  auto nbits = [&](std::string name, int64_t M0, int64_t M1, int64_t K, int64_t N, int64_t block, int64_t bits,
                   int zp, bool bias) {
    const int64_t kb = (K + block - 1) / block;
    std::vector<In> in = {M1 ? X({M0, M1, K}) : X({M0, K}), Ints({N, kb, block * bits / 8}, 0, 255, D::kUInt8),
                          Pos({N, kb}, 0.01, 0.2)};
    if (zp == 1) in.push_back(Ints({N, (kb * bits + 7) / 8}, 0, 255, D::kUInt8));  // packed
    else if (zp == 2) in.push_back(Uni({N, kb}, 0, double((1 << bits) - 1)));      // A's type
    else in.push_back(None());
    if (bias) {
      in.push_back(None());  // g_idx
      in.push_back(X({N}));
    }
    Case c{std::move(name), "MatMulNBits", kFloats, std::move(in),
           {attr_int("K", K), attr_int("N", N), attr_int("block_size", block), attr_int("bits", bits),
            attr_int("accuracy_level", 4)},
           1, 1, ms};
    c.f32_tol = 2e-5;
    v.push_back(std::move(c));
  };
  nbits("gemv_m1", 1, 0, 128, 72, 32, 4, 0, false);
  nbits("gemv_m3_zp_bias", 3, 0, 96, 40, 32, 4, 1, true);
  nbits("gemv_m8_k_padded", 1, 8, 72, 33, 32, 4, 2, false);  // K = 72: the last block padded
  nbits("gemv_int8", 2, 0, 64, 24, 16, 8, 1, true);
  nbits("gemv_int2", 1, 0, 128, 20, 64, 2, 1, false);
  nbits("gemm_m37", 37, 0, 160, 70, 32, 4, 1, true);
  nbits("gemm_3d_block128", 2, 45, 256, 130, 128, 4, 0, true);
  // More than 8 rows of 16-bit A dequantize 32 values a thread (nbits4_dequant_kernel): zero
  // points of A's type and K padded to the block; B in two chunks of the workspace, packed zero
  // points and a bias.
  nbits("gemm4_m12_k96_block64_zp_typed", 12, 0, 96, 50, 64, 4, 2, false);
  nbits("gemm4_m16_k4096_n4000_two_chunks", 16, 0, 4096, 4000, 128, 4, 1, true);
  // The 4-bit few-row kernel (16-bit A, K and block multiples of 32): row bounds 1, 2, 4, 8; a
  // loop over K past one step with a partial last one; every zero-point form.
  nbits("gemv4_m1_k5120_block64", 1, 0, 5120, 19, 64, 4, 1, false);
  nbits("gemv4_m2_block128_zp_typed", 1, 2, 512, 37, 128, 4, 2, true);
  nbits("gemv4_m5_block32", 5, 0, 4160, 9, 32, 4, 0, true);
  nbits("gemv4_m8_block256", 8, 0, 1024, 66, 256, 4, 1, false);
  // The tensor-core 4-bit kernel: a last 128-value chunk of which one thread's part is live
  // (K = 1056), features past N in the last 16, 7 rows of the MMA's 8; several chunk rounds per
  // warp with a block of 128 (one scale per chunk).
  nbits("gemv4_m7_k1056_block32_zp_bias", 7, 0, 1056, 35, 32, 4, 1, true);
  nbits("gemv4_m1_k4096_block128", 1, 0, 4096, 48, 128, 4, 0, false);
  // The streaming 4-bit kernel (K a multiple of 128, whole 16-byte runs of scales): several tiles
  // per block with a last partial one and a bias; K in two chunks (8,192 + 1,024) with packed zero
  // points over 8 rows (three chunks, the last of 1,024); blocks of 512 (8 scales, one 16-byte run,
  // a chunk), 3 rows of a 3-D A; blocks of 1,024, whose chunks would hold half a run of scales
  // (the tensor-core kernel takes them: a copy of 8 bytes would never complete).
  nbits("gemv4s_m1_n4500_block32_bias", 1, 0, 2048, 4500, 32, 4, 0, true);
  nbits("gemv4s_m8_k9216_block128_zp", 8, 0, 9216, 40, 128, 4, 1, false);
  nbits("gemv4s_m3_3d_k8192_block512", 1, 3, 8192, 37, 512, 4, 0, true);
  nbits("gemv4s_m2_k8192_block1024", 2, 0, 8192, 21, 1024, 4, 1, false);
  // Tiles of two row-blocks (as many tiles as an H200's 132 SMs) over K in two chunks.
  nbits("gemv4s_m2_n4300_k4096_block64_zp", 2, 0, 4096, 4300, 64, 4, 1, false);

  // onyx::LinearNBits (group_nbits' stacked products): outputs cut by splits or SiLU-gated, by
  // the tensor-core kernel (16-bit A, up to 8 rows) or per output / a chunk of rows at a time
  // (float32 A, prompts, zero points of A's type).
  auto lnb = [&](std::string name, int64_t M, int64_t K, std::vector<int64_t> splits, bool gated, int64_t block,
                 int zp, std::string act = "") {
    int64_t N = 0;
    for (int64_t x : splits) N += x;
    if (gated) N *= 2;
    const int64_t kb = (K + block - 1) / block;
    std::vector<In> in = {X({M, K}), Ints({N, kb, block / 2}, 0, 255, D::kUInt8), Pos({N, kb}, 0.01, 0.2)};
    if (zp == 1) in.push_back(Ints({N, (kb * 4 + 7) / 8}, 0, 255, D::kUInt8));
    else if (zp == 2) in.push_back(Uni({N, kb}, 0, 15));
    std::vector<Attribute> attrs = {attr_int("K", K), attr_int("N", N), attr_int("block_size", block),
                                    attr_int("bits", 4)};
    if (gated) attrs.push_back(attr_int("gated", 1));
    else attrs.push_back(attr_ints("splits", splits));
    if (!act.empty()) attrs.push_back(attr_string("activation", act));
    Case c{std::move(name), "LinearNBits", kFloats, std::move(in), std::move(attrs),
           gated ? 1 : static_cast<int>(splits.size()), 1, "onyx"};
    c.f32_tol = 2e-5;
    // Prompts of the gated form round the gate and up products to the type before the gating
    // (a chunk of rows at a time through the workspace): three roundings, as RmsNormLinearNBits'.
    if (gated) c.f16_tol = 2e-2;
    v.push_back(std::move(c));
  };
  lnb("splits_m1_zp", 1, 256, {32, 16, 16}, false, 32, 1);
  lnb("splits_m5_k1056", 5, 1056, {24, 11}, false, 32, 0);
  lnb("splits_m37_prompt", 37, 128, {16, 8}, false, 32, 1);
  lnb("splits_m2_zp_typed", 2, 256, {8, 24}, false, 64, 2);
  lnb("gated_m1_block128_zp", 1, 512, {40}, true, 128, 1);
  lnb("gated_m8", 8, 96, {20}, true, 32, 0);
  lnb("gated_m37_prompt", 37, 128, {24}, true, 32, 1);
  // The streaming kernel: splits over 4 rows with zero points; a gated product of 2,100 outputs
  // (tiles of 8 outputs, several per block, the last partial).
  lnb("splits_m4_k2048_stream_zp", 4, 2048, {64, 16, 16}, false, 32, 1);
  lnb("gated_m1_k1024_stream_tail", 1, 1024, {2100}, true, 64, 0);
  // Blocks of 128 gated with packed zero points in tiles of two row-blocks; blocks of 256 with
  // split outputs over K in two chunks.
  lnb("gated_m3_k2048_block128_stream_zp", 3, 2048, {2100}, true, 128, 1);
  lnb("splits_m1_k6144_block256_stream", 1, 6144, {40, 24}, false, 256, 0);
  // GELU gates (Gemma's MLP from onnxruntime-genai's builder): streaming, tensor cores, a prompt.
  lnb("gated_gelu_tanh_m1_k1024_stream", 1, 1024, {2100}, true, 64, 0, "gelu_tanh");
  lnb("gated_gelu_m8", 8, 96, {20}, true, 32, 0, "gelu");
  lnb("gated_gelu_tanh_m37_prompt", 37, 128, {24}, true, 32, 1, "gelu_tanh");

  // onyx::RmsNormLinearNBits: the norm before LinearNBits (with and without skip; the sum),
  // in the 4-bit kernels' shared memory or through the workspace (prompts, float32).
  auto rnb = [&](std::string name, int64_t M, int64_t K, std::vector<int64_t> splits, bool gated, bool skip,
                 std::string act = "") {
    int64_t N = 0;
    for (int64_t x : splits) N += x;
    if (gated) N *= 2;
    const int64_t block = 32, kb = K / block;
    std::vector<In> in = {X({M, K}), skip ? X({M, K}) : None(), Pos({K}, 0.5, 1.5),
                          Ints({N, kb, block / 2}, 0, 255, D::kUInt8), Pos({N, kb}, 0.01, 0.2),
                          Ints({N, (kb + 1) / 2}, 0, 255, D::kUInt8)};
    std::vector<Attribute> attrs = {attr_int("K", K), attr_int("N", N), attr_int("block_size", block),
                                    attr_int("bits", 4), attr_float("epsilon", 1e-5f)};
    if (gated) attrs.push_back(attr_int("gated", 1));
    else attrs.push_back(attr_ints("splits", splits));
    if (!act.empty()) attrs.push_back(attr_string("activation", act));
    Case c{std::move(name), "RmsNormLinearNBits", kFloats, std::move(in), std::move(attrs),
           1 + (gated ? 1 : static_cast<int>(splits.size())), 1, "onyx"};
    c.f32_tol = 2e-5;
    c.f16_tol = 2e-2;
    v.push_back(std::move(c));
  };
  rnb("skip_splits_m1", 1, 512, {32, 16, 16}, false, true);
  rnb("skip_gated_m2", 2, 512, {24}, true, true);
  rnb("gated_m8", 8, 256, {24}, true, true);
  rnb("no_skip_m3", 3, 1024, {40}, false, false);
  rnb("skip_splits_m8_k4096", 8, 4096, {64, 16, 16}, false, true);  // normalized once, then the product
  // In the streaming kernel's shared memory at 8 rows; in the tensor-core kernel's (K = 288 is
  // not a multiple of 128).
  rnb("skip_gated_m8_k1024_stream", 8, 1024, {300}, true, true);
  rnb("skip_gated_gelu_tanh_m1_k1024_stream", 1, 1024, {300}, true, true, "gelu_tanh");
  rnb("skip_splits_m2_k288", 2, 288, {16, 8}, false, true);
  rnb("skip_gated_m37_prompt", 37, 128, {16}, true, true);

  // GatherBlockQuantized: uint8 data [rows, (inner,) packed cols], scales of the output type.
  auto gbq = [&](std::string name, Shape data, Shape scales, In indices, bool zp, int64_t bits, int64_t block) {
    Shape zps = scales;
    zps.dims().back() = (scales.dims().back() * bits + 7) / 8;
    std::vector<In> in = {Ints(data, 0, 255, D::kUInt8), std::move(indices), Pos(scales, 0.01, 0.2)};
    if (zp) in.push_back(Ints(zps, 0, 255, D::kUInt8));
    v.push_back({std::move(name), "GatherBlockQuantized", kFloats, std::move(in),
                 {attr_int("bits", bits), attr_int("block_size", block), attr_int("quantize_axis", -1)}, 1, 1, ms});
  };
  gbq("int4_zp", {50, 64}, {50, 4}, Vals(D::kInt64, {2, 3}, {0, 49, 7, -1, -50, 12}), true, 4, 32);
  gbq("int4_no_zp_out_of_range", {40, 32}, {40, 4}, Vals(D::kInt32, {4}, {3, 40, -41, 39}), false, 4, 16);
  gbq("int8_inner", {6, 3, 48}, {6, 3, 3}, Vals(D::kInt64, {2}, {5, 0}), true, 8, 16);
}

// Ops of the exporters' mask and position arithmetic (Trilu for causal masks, CumSum for
// position ids from the attention mask, ScatterND for cache and mask updates).
void mask_ops(std::vector<Case>& v) {
  v.push_back({"upper_k2", "Trilu", kAll, {X({2, 5, 7}), I64({2})}, {}, 1, 14});
  v.push_back({"lower_k_neg", "Trilu", kAll, {X({3, 6, 4}), I64({-1})}, {attr_int("upper", 0)}, 1, 14});
  v.push_back({"no_k", "Trilu", kFloatsInts, {X({9, 9})}, {}, 1, 14});
  v.push_back({"axis1", "CumSum", kFloatsInts, {Ints({3, 4, 5}, -3, 3), I64({1})}, {}, 1, 14});
  v.push_back({"exclusive_reverse", "CumSum", kFloatsInts, {Ints({2, 33}, -3, 3), I64({-1})},
               {attr_int("exclusive", 1), attr_int("reverse", 1)}, 1, 14});
  v.push_back({"axis0_int32", "CumSum", kFloats, {X({6, 3}), Vals(DType::kInt32, {}, {0})}, {}, 1, 14});
  v.push_back({"rows", "ScatterND", kFloatsInts,
               {X({4, 5, 6}), Vals(DType::kInt64, {3, 2}, {0, 1, 3, 4, 2, -5}), X({3, 6})}, {}, 1, 16});
  v.push_back({"elements", "ScatterND", kAll,
               {X({3, 4}), Vals(DType::kInt64, {2, 2, 2}, {0, 0, 2, 3, 1, 1, -1, -4}), X({2, 2})}, {}, 1, 13});
  // GatherND (torch.export's masks gather the attention mask by position pairs).
  v.push_back({"pairs", "GatherND", kAll, {X({3, 9}), Vals(DType::kInt64, {2, 2, 2}, {0, 1, 2, 8, 1, -1, -3, 0})}, {},
               1, 13});
  v.push_back({"rows", "GatherND", kFloatsInts, {X({4, 5, 6}), Vals(DType::kInt64, {3, 1}, {3, 0, -2})}, {}, 1, 13});
  v.push_back({"batch_dims1", "GatherND", kFloatsInts,
               {X({2, 3, 4}), Vals(DType::kInt64, {2, 2, 1}, {2, 0, 1, -1})}, {attr_int("batch_dims", 1)}, 1, 13});
  v.push_back({"reduction_add", "ScatterND", kFloats, {X({4, 2}), Vals(DType::kInt64, {2, 1}, {1, 3}), X({2, 2})},
               {attr_string("reduction", "add")}, 1, 16, "", Expect::kDecline});
}

void matmul(std::vector<Case>& v) {
  v.push_back({"2d", "MatMul", kFloats, {X({33, 17}), X({17, 29})}});
  v.push_back({"big", "MatMul", kFloats, {X({256, 512}), X({512, 384})}});
  v.push_back({"batched", "MatMul", kFloats, {X({2, 3, 64, 32}), X({2, 3, 32, 48})}});
  v.push_back({"bcast_b2d", "MatMul", kFloats, {X({2, 3, 64, 32}), X({32, 48})}});
  v.push_back({"b_batch1", "MatMul", kFloats, {X({5, 64, 32}), X({1, 32, 16})}});
  v.push_back({"a2d_b_batched", "MatMul", kFloats, {X({64, 32}), X({4, 32, 16})}});
  v.push_back({"bcast_both", "MatMul", kFloats, {X({2, 1, 8, 12}), X({1, 3, 12, 5})}});
  v.push_back({"bcast_mixed", "MatMul", kFloats, {X({3, 1, 4, 8, 12}), X({2, 1, 12, 6})}});
  // Few rows (decode shapes).
  v.push_back({"rows1_gemv", "MatMul", kFloats, {X({1, 1, 2048}), X({2048, 512})}});
  v.push_back({"rows3_gemv_k_odd", "MatMul", kFloats, {X({3, 1000}), X({1000, 136})}});
  v.push_back({"rows8_gemv_wide", "MatMul", kFloats, {X({2, 4, 256}), X({256, 8200})}});
  v.push_back({"rows5_n_not_8", "MatMul", kFloats, {X({5, 64}), X({64, 30})}});
  v.push_back({"rows9_cublas", "MatMul", kFloats, {X({9, 300}), X({300, 64})}});
  v.push_back({"vec_vec", "MatMul", kFloats, {X({37}), X({37})}});
  v.push_back({"vec_mat", "MatMul", kFloats, {X({32}), X({32, 24})}});
  v.push_back({"mat_vec", "MatMul", kFloats, {X({24, 32}), X({32})}});
  v.push_back({"vec_batched", "MatMul", kFloats, {X({32}), X({3, 32, 24})}});
  v.push_back({"batched_vec", "MatMul", kFloats, {X({3, 5, 32}), X({32})}});
  v.push_back({"odd", "MatMul", kFloats, {X({7, 3}), X({3, 5})}});
  v.push_back({"int32", "MatMul", {D::kInt32}, {X({4, 3}), X({3, 5})}, {}, 1, 18, "", Expect::kDecline});

  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      Shape a = ta ? Shape{40, 24} : Shape{24, 40};
      Shape b = tb ? Shape{36, 40} : Shape{40, 36};
      std::string t = cat("t", ta, tb);
      std::vector<Attribute> tr = {attr_int("transA", ta), attr_int("transB", tb)};
      v.push_back({t + "_noc", "Gemm", kFloats, {X(a), X(b)}, tr, 1, 13});
      v.push_back({t + "_row_c", "Gemm", kFloats, {X(a), X(b), X({36})}, tr, 1, 13});
      std::vector<Attribute> ab = tr;
      ab.push_back(attr_float("alpha", 0.75f));
      ab.push_back(attr_float("beta", -1.5f));
      v.push_back({t + "_full_c_alpha_beta", "Gemm", kFloats, {X(a), X(b), X({24, 36})}, ab, 1, 13});
    }
  // Conv (im2col + cuBLASLt): Whisper's 1-D front end, a ViT/CLIP patch embedding, groups with
  // dilation and asymmetric pads, SAME_UPPER, 3-D, and one whose columns span several workspace chunks.
  v.push_back({"1d_whisper", "Conv", kFloats, {X({2, 6, 20}), X({8, 6, 3}), X({8})},
               {attr_ints("pads", {1, 1}), attr_ints("strides", {2})}, 1, 11});
  v.push_back({"1d_nobias", "Conv", kFloats, {X({1, 5, 17}), X({4, 5, 3})}, {attr_ints("pads", {1, 1})}, 1, 11});
  v.push_back({"2d_patch", "Conv", kFloats, {X({1, 3, 16, 16}), X({8, 3, 4, 4}), X({8})},
               {attr_ints("strides", {4, 4})}, 1, 11});
  v.push_back({"2d_group_dilated", "Conv", kFloats, {X({2, 6, 9, 11}), X({9, 2, 3, 3}), X({9})},
               {attr_int("group", 3), attr_ints("dilations", {2, 1}), attr_ints("pads", {2, 1, 1, 0})}, 1, 11});
  v.push_back({"2d_same_upper", "Conv", kFloats, {X({1, 4, 7, 8}), X({5, 4, 3, 2})},
               {attr_string("auto_pad", "SAME_UPPER"), attr_ints("strides", {2, 2})}, 1, 11});
  v.push_back({"3d", "Conv", kFloats, {X({1, 2, 5, 6, 7}), X({3, 2, 2, 3, 2})},
               {attr_ints("pads", {1, 0, 1, 1, 0, 1})}, 1, 11});
  v.push_back({"1d_chunked", "Conv", {D::kFloat32}, {X({1, 1024, 8192}), X({16, 1024, 3}), X({16})},
               {attr_ints("pads", {1, 1})}, 1, 11});
  v.push_back(
      {"row_c_1n_alpha", "Gemm", kFloats, {X({24, 40}), X({40, 36}), X({1, 36})}, {attr_float("alpha", 2.f)}, 1, 13});
  v.push_back({"big_row_c", "Gemm", kFloats, {X({256, 512}), X({384, 512}), X({384})}, {attr_int("transB", 1)}, 1, 13});
  v.push_back({"beta0_any_c", "Gemm", kFloats, {X({8, 16}), X({16, 12}), X({})}, {attr_float("beta", 0.f)}, 1, 13});
  v.push_back(
      {"m1_row_c_beta", "Gemm", kFloats, {X({1, 16}), X({16, 12}), X({12})}, {attr_float("beta", 0.5f)}, 1, 13});
  // Forms cuBLASLt has no epilogue for: beta * C is broadcast into the output first.
  v.push_back({"scalar_c", "Gemm", kFloats, {X({8, 16}), X({16, 12}), X({})}, {attr_float("beta", 1.5f)}, 1, 13});
  v.push_back({"col_c", "Gemm", kFloats, {X({8, 16}), X({16, 12}), X({8, 1})}, {}, 1, 13});
  v.push_back({"row_c_beta", "Gemm", kFloats, {X({8, 16}), X({16, 12}), X({12})}, {attr_float("beta", 0.5f)}, 1, 13});
  v.push_back({"row_c_beta_transposed",
               "Gemm",
               kFloats,
               {X({16, 24}), X({40, 16}), X({40})},
               {attr_float("beta", 1.1f), attr_float("alpha", 0.9f), attr_int("transA", 1), attr_int("transB", 1)},
               1,
               13});
}

std::vector<TestCase> all_cases() {
  std::vector<Case> v;
  elementwise(v);
  unary(v);
  casts(v);
  shapes(v);
  reductions(v);
  softmax(v);
  norms(v);
  data(v);
  genai_ops(v);
  rotary(v);
  contrib(v);
  linear_cases(v);
  matmul(v);
  mask_ops(v);
  return expand(v);
}

const std::vector<TestCase>& cases() {
  static const std::vector<TestCase> c = all_cases();
  return c;
}

class CudaKernel : public testing::TestWithParam<TestCase> {};

TEST_P(CudaKernel, MatchesCpu) { run_case(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, CudaKernel, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<TestCase>& info) { return info.param.id; });

// Every op with a CUDA kernel has cases here (ops come from the CPU registry, which
// every CUDA kernel must also be in: shape inference lives there).
TEST(CudaKernelCoverage, EveryKernelHasCases) {
  const auto& reg = CudaKernelRegistry::global();
  std::set<std::pair<std::string, std::string>> tested;
  for (const TestCase& tc : cases()) tested.insert({tc.c.domain, tc.c.op});
  size_t found = 0;
  std::string missing;
  for (const std::string& full : OpRegistry::global().op_names()) {
    const size_t sep = full.find("::");
    const std::string dom = sep == std::string::npos ? "" : full.substr(0, sep);
    const std::string name = sep == std::string::npos ? full : full.substr(sep + 2);
    if (reg.versions(dom, name).empty()) continue;
    ++found;
    // onyx.test ops need the session's staging path; the capture tests exercise them. The
    // collectives need a GPU group: test_collectives_gpu.cpp.
    const bool collective = dom == "onyx" && (name == "AllReduce" || name == "AllGather");
    if (!tested.count({dom, name}) && dom != "onyx.test" && !collective) missing += " " + full;
  }
  EXPECT_TRUE(missing.empty()) << "CUDA kernels without a test case:" << missing;
  EXPECT_EQ(found, reg.size()) << "CUDA kernels for ops the CPU registry does not know";
}

}  // namespace
}  // namespace onyx::cuda::test
