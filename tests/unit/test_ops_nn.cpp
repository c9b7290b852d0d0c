// Reductions, matrix products, softmax and normalization against independent
// reference loops (float64 / int64), on fresh random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "cpu/thread_pool.h"
#include "op_test_util.h"

namespace onyx {

namespace {

// Multi-index helpers for the reference loops.
std::vector<int64_t> unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.rank());
  for (size_t i = s.rank(); i-- > 0;) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}
int64_t ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t f = 0;
  for (size_t i = 0; i < s.rank(); ++i) f = f * s[i] + idx[i];
  return f;
}

Tensor axes_tensor(std::vector<int64_t> axes) {
  return Tensor::from_vector<int64_t>(axes, Shape{static_cast<int64_t>(axes.size())});
}

// The reduced values of x over `axes` (keepdims shape), grouped per output element.
std::vector<std::vector<double>> groups(const Tensor& x, const std::vector<int64_t>& axes, Shape& out_shape) {
  out_shape = x.shape();
  for (int64_t a : axes) out_shape[a] = 1;
  std::vector<std::vector<double>> g(out_shape.numel());
  for (int64_t i = 0; i < x.numel(); ++i) {
    std::vector<int64_t> idx = unravel(i, x.shape());
    for (int64_t a : axes) idx[a] = 0;
    g[ravel(idx, out_shape)].push_back(x.get_as_double(i));
  }
  return g;
}

template <class T>
void check_int_reductions() {
  const std::vector<int64_t> axes = {0, 2};
  using Ref = std::function<double(const std::vector<double>&)>;
  auto sum = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s;
  };
  const std::vector<std::tuple<std::string, Ref, bool>> ops = {
      {"ReduceSum", sum, false},
      {"ReduceMean", [&](const std::vector<double>& v) { return std::trunc(sum(v) / v.size()); }, false},
      {"ReduceMax", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }, false},
      {"ReduceMin", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }, false},
      {"ReduceProd",
       [](const std::vector<double>& v) {
         double p = 1;
         for (double x : v) p *= x;
         return p;
       },
       false},
      {"ReduceL1",
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += std::abs(x);
         return s;
       },
       false},
      {"ReduceSumSquare",
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += x * x;
         return s;
       },
       false},
      {"ReduceL2",
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += x * x;
         return std::trunc(std::sqrt(s));
       },
       true},
      {"ReduceLogSum", [&](const std::vector<double>& v) { return std::trunc(std::log(sum(v))); }, true},
      {"ReduceLogSumExp",
       [](const std::vector<double>& v) {
         double s = 0;
         for (double x : v) s += std::exp(x);
         return std::trunc(std::log(s));
       },
       true},
  };
  for (const auto& [name, ref, positive] : ops) {
    SCOPED_TRACE(name + " " + std::string(dtype_name(dtype_of<T>)));
    // Positive values where the result is a log or root of the data.
    const bool is_unsigned = std::is_unsigned_v<T>;
    Tensor x = test::random_tensor<T>(Shape{3, 4, 5}, positive || is_unsigned ? 1 : -4, positive ? 6 : 4);
    Shape out_shape;
    auto g = groups(x, axes, out_shape);
    // opset 18: axes as an input; opset 13 (11 for ReduceSum): as an attribute.
    auto out18 = test::run_op(name, {x, axes_tensor(axes)}, {}, 1, 18);
    auto out11 = test::run_op(name, {x}, {test::attr_ints("axes", axes), test::attr_int("keepdims", 0)}, 1,
                              name == "ReduceSum" ? 11 : 13);
    ASSERT_EQ(out18[0].shape(), out_shape);
    ASSERT_EQ(out11[0].shape(), (Shape{4}));
    ASSERT_EQ(out18[0].dtype(), dtype_of<T>);
    for (int64_t o = 0; o < out_shape.numel(); ++o) {
      double want = ref(g[o]);
      // Truncated logs and roots may land either side of an integer.
      const double tol = positive ? 1 : 0;
      EXPECT_NEAR(out18[0].get_as_double(o), want, tol) << "output " << o;
      EXPECT_NEAR(out11[0].get_as_double(o), want, tol) << "output " << o;
    }
  }
}

}  // namespace

TEST(OpsNn, ReduceInt32EveryReduction) { check_int_reductions<int32_t>(); }
TEST(OpsNn, ReduceInt64EveryReduction) { check_int_reductions<int64_t>(); }
TEST(OpsNn, ReduceUInt32EveryReduction) { check_int_reductions<uint32_t>(); }

TEST(OpsNn, ReduceEmptyAxesReducesAllOrIsNoop) {
  Tensor x = test::random_tensor<int64_t>(Shape{2, 3}, -9, 9);
  Tensor empty = Tensor::from_vector<int64_t>({}, Shape{0});
  auto all = test::run_op("ReduceSum", {x, empty}, {test::attr_int("keepdims", 0)}, 1, 13);
  int64_t s = 0;
  for (int64_t i = 0; i < 6; ++i) s += x.data<int64_t>()[i];
  ASSERT_EQ(all[0].shape(), Shape{});
  EXPECT_EQ(all[0].data<int64_t>()[0], s);
  auto noop = test::run_op("ReduceSum", {x, empty}, {test::attr_int("noop_with_empty_axes", 1)}, 1, 13);
  ASSERT_EQ(noop[0].shape(), x.shape());
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(noop[0].data<int64_t>()[i], x.data<int64_t>()[i]);
}

TEST(OpsNn, ReduceMaxOverZeroSizeAxisIsLowest) {
  Tensor x(DType::kFloat32, Shape{2, 0, 3});
  auto out = test::run_op("ReduceMax", {x, axes_tensor({1})}, {}, 1, 18);
  ASSERT_EQ(out[0].shape(), (Shape{2, 1, 3}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(out[0].data<float>()[i], -INFINITY);
  Tensor xi(DType::kInt32, Shape{0, 2});
  auto outi = test::run_op("ReduceMin", {xi, axes_tensor({0})}, {test::attr_int("keepdims", 0)}, 1, 18);
  ASSERT_EQ(outi[0].shape(), (Shape{2}));
  EXPECT_EQ(outi[0].data<int32_t>()[0], std::numeric_limits<int32_t>::max());
}

TEST(OpsNn, ArgMaxSelectLastIndex) {
  Tensor x = Tensor::from_vector<int32_t>({1, 3, 3, 2, 5, 5, 5, 0}, Shape{2, 4});
  auto first = test::run_op("ArgMax", {x}, {test::attr_int("axis", 1)}, 1, 13);
  auto last = test::run_op("ArgMax", {x}, {test::attr_int("axis", 1), test::attr_int("select_last_index", 1)}, 1, 13);
  ASSERT_EQ(first[0].shape(), (Shape{2, 1}));
  EXPECT_EQ(first[0].data<int64_t>()[0], 1);
  EXPECT_EQ(first[0].data<int64_t>()[1], 0);
  EXPECT_EQ(last[0].data<int64_t>()[0], 2);
  EXPECT_EQ(last[0].data<int64_t>()[1], 2);
}

TEST(OpsNn, CumSumExclusiveReverseAgainstLoop) {
  Tensor x = test::random_tensor<int64_t>(Shape{3, 5}, -9, 9);
  auto out = test::run_op("CumSum", {x, Tensor::scalar<int64_t>(1)},
                          {test::attr_int("exclusive", 1), test::attr_int("reverse", 1)}, 1, 14);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) {
      int64_t s = 0;
      for (int64_t k = j + 1; k < 5; ++k) s += x.data<int64_t>()[i * 5 + k];
      EXPECT_EQ(out[0].data<int64_t>()[i * 5 + j], s);
    }
}

TEST(OpsNn, BatchedMatMulSplitsOverThreadsWithTheSameSums) {
  // Float32 products of many batch entries split over the pool by entry (13 entries: runs of 6
  // and 7 at 2 threads, 4-5 at 3), each entry's sums as on one thread, and all of them against
  // float64.
  const Tensor a = test::random_tensor<float>(Shape{1, 13, 21, 9});
  const Tensor b = test::random_tensor<float>(Shape{1, 13, 9, 17});
  const auto one = test::run_op("MatMul", {a, b}, {}, 1, 13);
  ASSERT_EQ(one[0].shape(), (Shape{1, 13, 21, 17}));
  for (int64_t t = 0; t < 13; ++t)
    for (int64_t i = 0; i < 21; ++i)
      for (int64_t j = 0; j < 17; ++j) {
        double s = 0;
        for (int64_t k = 0; k < 9; ++k)
          s += double(a.data<float>()[(t * 21 + i) * 9 + k]) * b.data<float>()[(t * 9 + k) * 17 + j];
        ASSERT_NEAR(one[0].data<float>()[(t * 21 + i) * 17 + j], s, 1e-5) << "entry " << t;
      }
  for (int threads : {2, 3}) {
    cpu::ThreadPool pool(threads);
    cpu::PoolScope scope(&pool);
    const auto split = test::run_op("MatMul", {a, b}, {}, 1, 13);
    for (int64_t e = 0; e < one[0].numel(); ++e)
      ASSERT_EQ(split[0].data<float>()[e], one[0].data<float>()[e]) << threads << " threads at " << e;
  }
}

TEST(OpsNn, MatMulBroadcastsBatchDims) {
  for (DType dt : {DType::kFloat32, DType::kInt32}) {
    Tensor a = dt == DType::kFloat32 ? test::random_tensor<float>(Shape{2, 1, 3, 4})
                                     : test::random_tensor<int32_t>(Shape{2, 1, 3, 4}, -5, 5);
    Tensor b = dt == DType::kFloat32 ? test::random_tensor<float>(Shape{3, 4, 5})
                                     : test::random_tensor<int32_t>(Shape{3, 4, 5}, -5, 5);
    auto out = test::run_op("MatMul", {a, b}, {}, 1, 13);
    ASSERT_EQ(out[0].shape(), (Shape{2, 3, 3, 5}));
    for (int64_t p = 0; p < 2; ++p)
      for (int64_t q = 0; q < 3; ++q)
        for (int64_t i = 0; i < 3; ++i)
          for (int64_t j = 0; j < 5; ++j) {
            double s = 0;
            for (int64_t k = 0; k < 4; ++k)
              s += a.get_as_double((p * 3 + i) * 4 + k) * b.get_as_double((q * 4 + k) * 5 + j);
            EXPECT_NEAR(out[0].get_as_double(((p * 3 + q) * 3 + i) * 5 + j), s, 1e-4);
          }
  }
  // 1-D operands: the promoted axis is dropped.
  Tensor v = test::random_tensor<double>(Shape{4});
  Tensor m = test::random_tensor<double>(Shape{2, 4, 3});
  auto out = test::run_op("MatMul", {v, m}, {}, 1, 13);
  ASSERT_EQ(out[0].shape(), (Shape{2, 3}));
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t j = 0; j < 3; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 4; ++k) s += v.data<double>()[k] * m.data<double>()[(p * 4 + k) * 3 + j];
      EXPECT_NEAR(out[0].data<double>()[p * 3 + j], s, 1e-12);
    }
}

TEST(OpsNn, GemmTransposesAlphaBetaAndBroadcastC) {
  const int64_t M = 3, N = 5, K = 4;
  for (int ta : {0, 1})
    for (int tb : {0, 1})
      for (DType dt : {DType::kFloat32, DType::kInt64}) {
        SCOPED_TRACE(::testing::Message() << "transA=" << ta << " transB=" << tb << " " << dtype_name(dt));
        Shape as = ta ? Shape{K, M} : Shape{M, K}, bs = tb ? Shape{N, K} : Shape{K, N};
        bool f = dt == DType::kFloat32;
        Tensor a = f ? test::random_tensor<float>(as) : test::random_tensor<int64_t>(as, -5, 5);
        Tensor b = f ? test::random_tensor<float>(bs) : test::random_tensor<int64_t>(bs, -5, 5);
        Tensor c = f ? test::random_tensor<float>(Shape{N}) : test::random_tensor<int64_t>(Shape{N}, -5, 5);
        const float alpha = f ? 0.75f : 2.f, beta = f ? -1.5f : 3.f;
        auto out = test::run_op("Gemm", {a, b, c},
                                {test::attr_int("transA", ta), test::attr_int("transB", tb),
                                 test::attr_float("alpha", alpha), test::attr_float("beta", beta)},
                                1, 13);
        ASSERT_EQ(out[0].shape(), (Shape{M, N}));
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
              s += a.get_as_double(ta ? k * M + i : i * K + k) * b.get_as_double(tb ? j * K + k : k * N + j);
            double want = alpha * s + beta * c.get_as_double(j);
            EXPECT_NEAR(out[0].get_as_double(i * N + j), want, 1e-4);
          }
      }
}

TEST(OpsNn, GemmWithoutC) {
  Tensor a = test::random_tensor<double>(Shape{2, 3});
  Tensor b = test::random_tensor<double>(Shape{3, 2});
  auto out = test::run_op("Gemm", {a, b}, {}, 1, 13);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j) {
      double s = 0;
      for (int64_t k = 0; k < 3; ++k) s += a.data<double>()[i * 3 + k] * b.data<double>()[k * 2 + j];
      EXPECT_NEAR(out[0].data<double>()[i * 2 + j], s, 1e-12);
    }
}

TEST(OpsNn, SoftmaxAlongAxisAndCoercedBeforeOpset13) {
  Tensor x = test::random_tensor<float>(Shape{2, 3, 4});
  // Opset 13: along axis 1 only. Opset 11: over the flattened axes 1..2.
  auto along = test::run_op("Softmax", {x}, {test::attr_int("axis", 1)}, 1, 13);
  auto coerced = test::run_op("Softmax", {x}, {test::attr_int("axis", 1)}, 1, 11);
  auto logsm = test::run_op("LogSoftmax", {x}, {test::attr_int("axis", 1)}, 1, 13);
  const float* px = x.data<float>();
  for (int64_t n = 0; n < 2; ++n) {
    double total = 0;
    for (int64_t i = 0; i < 12; ++i) total += std::exp(static_cast<double>(px[n * 12 + i]));
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t k = 0; k < 4; ++k) {
        double s = 0;
        for (int64_t cc = 0; cc < 3; ++cc) s += std::exp(static_cast<double>(px[(n * 3 + cc) * 4 + k]));
        const int64_t i = (n * 3 + c) * 4 + k;
        EXPECT_NEAR(along[0].data<float>()[i], std::exp(static_cast<double>(px[i])) / s, 1e-6);
        EXPECT_NEAR(logsm[0].data<float>()[i], static_cast<double>(px[i]) - std::log(s), 1e-5);
        EXPECT_NEAR(coerced[0].data<float>()[i], std::exp(static_cast<double>(px[i])) / total, 1e-6);
      }
  }
}

TEST(OpsNn, LayerNormalizationAgainstFloat64) {
  Tensor x = test::random_tensor<float>(Shape{2, 3, 8});
  for (int64_t axis : {-1, 1}) {
    SCOPED_TRACE(axis);
    Shape ns = axis == -1 ? Shape{8} : Shape{3, 8};
    Tensor scale = test::random_tensor<float>(ns);
    Tensor bias = test::random_tensor<float>(ns);
    auto out = test::run_op("LayerNormalization", {x, scale, bias},
                            {test::attr_int("axis", axis), test::attr_float("epsilon", 1e-3f)}, 3, 17);
    const int64_t cols = ns.numel(), rows = x.numel() / cols;
    ASSERT_EQ(out[1].shape(), axis == -1 ? (Shape{2, 3, 1}) : (Shape{2, 1, 1}));
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mean += x.data<float>()[r * cols + j];
      mean /= cols;
      for (int64_t j = 0; j < cols; ++j) var += std::pow(x.data<float>()[r * cols + j] - mean, 2);
      var /= cols;
      const double inv = 1 / std::sqrt(var + 1e-3);
      EXPECT_NEAR(out[1].data<float>()[r], mean, 1e-5);
      EXPECT_NEAR(out[2].data<float>()[r], inv, 1e-4);
      for (int64_t j = 0; j < cols; ++j) {
        double want = (x.data<float>()[r * cols + j] - mean) * inv * scale.data<float>()[j] + bias.data<float>()[j];
        EXPECT_NEAR(out[0].data<float>()[r * cols + j], want, 1e-4);
      }
    }
  }
}

TEST(OpsNn, SkipSimplifiedLayerNormalizationAgainstFloat64) {
  Tensor x = test::random_tensor<float>(Shape{2, 3, 6});
  Tensor skip = test::random_tensor<float>(Shape{3, 6});
  Tensor gamma = test::random_tensor<float>(Shape{6});
  auto out = test::run_op("SkipSimplifiedLayerNormalization", {x, skip, gamma}, {test::attr_float("epsilon", 1e-5f)},
                          4, 1, "com.microsoft");
  ASSERT_EQ(out[2].shape(), (Shape{2, 3, 1}));
  for (int64_t r = 0; r < 6; ++r) {
    double ss = 0;
    std::vector<double> v(6);
    for (int64_t j = 0; j < 6; ++j) {
      v[j] = x.data<float>()[r * 6 + j] + skip.data<float>()[(r % 3) * 6 + j];
      ss += v[j] * v[j];
      EXPECT_NEAR(out[3].data<float>()[r * 6 + j], v[j], 1e-6);
    }
    const double inv = 1 / std::sqrt(ss / 6 + 1e-5);
    EXPECT_NEAR(out[2].data<float>()[r], inv, 1e-4);
    for (int64_t j = 0; j < 6; ++j) EXPECT_NEAR(out[0].data<float>()[r * 6 + j], v[j] * inv * gamma.data<float>()[j], 1e-4);
  }
}

TEST(OpsNn, EinsumBatchMatmulAndTrace) {
  Tensor a = test::random_tensor<double>(Shape{2, 3, 4});
  Tensor b = test::random_tensor<double>(Shape{2, 4, 5});
  auto out = test::run_op("Einsum", {a, b}, {test::attr_string("equation", "bij, bjk -> bik")}, 1, 12);
  ASSERT_EQ(out[0].shape(), (Shape{2, 3, 5}));
  for (int64_t p = 0; p < 2; ++p)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t k = 0; k < 5; ++k) {
        double s = 0;
        for (int64_t j = 0; j < 4; ++j) s += a.data<double>()[(p * 3 + i) * 4 + j] * b.data<double>()[(p * 4 + j) * 5 + k];
        EXPECT_NEAR(out[0].data<double>()[(p * 3 + i) * 5 + k], s, 1e-12);
      }
  Tensor sq = test::random_tensor<double>(Shape{3, 4, 4});
  auto tr = test::run_op("Einsum", {sq}, {test::attr_string("equation", "...ii")}, 1, 12);
  ASSERT_EQ(tr[0].shape(), (Shape{3}));
  for (int64_t p = 0; p < 3; ++p) {
    double s = 0;
    for (int64_t i = 0; i < 4; ++i) s += sq.data<double>()[(p * 4 + i) * 4 + i];
    EXPECT_NEAR(tr[0].data<double>()[p], s, 1e-12);
  }
}

TEST(OpsNn, LossRejectsOutOfRangeLabel) {
  Tensor scores = test::random_tensor<float>(Shape{2, 3});
  Tensor labels = Tensor::from_vector<int64_t>({1, 3}, Shape{2});
  try {
    test::run_op("SoftmaxCrossEntropyLoss", {scores, labels}, {}, 1, 13);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 3"), std::string::npos) << e.what();
  }
}

TEST(OpsNn, BatchNormTrainingModeNormalizesByTheBatchAndMovesTheRunningStatistics) {
  const int64_t N = 2, C = 3, L = 4;
  Tensor x = test::random_tensor<float>(Shape{N, C, L});
  Tensor scale = test::random_tensor<float>(Shape{C}), bias = test::random_tensor<float>(Shape{C});
  Tensor mean = test::random_tensor<float>(Shape{C}), var = test::random_tensor<float>(Shape{C}, 0.5, 2);
  const float momentum = 0.7f, eps = 1e-3f;
  auto out = test::run_op("BatchNormalization", {x, scale, bias, mean, var},
                          {test::attr_int("training_mode", 1), test::attr_float("momentum", momentum),
                           test::attr_float("epsilon", eps)},
                          3, 15);
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) m += x.data<float>()[(n * C + c) * L + l];
    m /= N * L;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) v += std::pow(x.data<float>()[(n * C + c) * L + l] - m, 2);
    v /= N * L;  // the population variance
    for (int64_t n = 0; n < N; ++n)
      for (int64_t l = 0; l < L; ++l) {
        const int64_t i = (n * C + c) * L + l;
        const double want = (x.data<float>()[i] - m) / std::sqrt(v + eps) * scale.data<float>()[c] + bias.data<float>()[c];
        EXPECT_NEAR(out[0].data<float>()[i], want, 1e-5) << "element " << i;
      }
    EXPECT_NEAR(out[1].data<float>()[c], mean.data<float>()[c] * momentum + m * (1 - momentum), 1e-5);
    EXPECT_NEAR(out[2].data<float>()[c], var.data<float>()[c] * momentum + v * (1 - momentum), 1e-5);
  }
  // Outputs past the running statistics do not exist at opset 15.
  EXPECT_THROW(test::run_op("BatchNormalization", {x, scale, bias, mean, var}, {}, 2, 15), Error);
}

}  // namespace onyx
