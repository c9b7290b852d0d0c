// The random ops by their distributions: no two engines draw the same numbers, so the node
// tests of Bernoulli (which replay numpy's generator) are skipped and these check what the
// draws must satisfy instead, with bounds of five standard errors.
#include <gtest/gtest.h>

#include <cmath>

#include "op_test_util.h"

namespace onyx {

namespace {

using test::attr_float;
using test::attr_int;
using test::attr_ints;

TEST(OpsRandom, BernoulliDrawsOnesAtTheGivenRate) {
  const int64_t n = 40000;
  std::vector<double> p = {0.0, 0.3, 0.9, 1.0};
  Tensor probs(DType::kFloat32, Shape{4, n});
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t i = 0; i < n; ++i) probs.data<float>()[r * n + i] = static_cast<float>(p[r]);
  Tensor y = test::run_op("Bernoulli", {probs}, {}, 1, 22)[0];
  ASSERT_EQ(y.dtype(), DType::kFloat32);
  for (int64_t r = 0; r < 4; ++r) {
    double ones = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float v = y.data<float>()[r * n + i];
      ASSERT_TRUE(v == 0.f || v == 1.f) << v;
      ones += v;
    }
    const double rate = ones / static_cast<double>(n), se = std::sqrt(p[r] * (1 - p[r]) / static_cast<double>(n));
    EXPECT_NEAR(rate, p[r], 5 * se + 1e-12) << "p = " << p[r];
  }
  // A dtype attribute picks the output type; probabilities outside [0, 1] are refused.
  Tensor b = test::run_op("Bernoulli", {probs}, {attr_int("dtype", 9)}, 1, 22)[0];
  EXPECT_EQ(b.dtype(), DType::kBool);
  EXPECT_THROW(test::run_op("Bernoulli", {Tensor::from_vector<float>({1.5f}, Shape{1})}, {}, 1, 22), Error);
}

TEST(OpsRandom, TrainingDropoutKeepsAtOneMinusRatioAndScales) {
  const int64_t n = 40000;
  const double ratio = 0.3;
  Tensor x = test::random_tensor<float>(Shape{4, n / 4}, 0.5, 3);  // never 0, so a dropped element shows
  auto run = [&](bool training, std::vector<Attribute> a, double r) {
    return test::run_op("Dropout", {x, Tensor::scalar<float>(static_cast<float>(r)), Tensor::scalar<bool>(training)},
                        std::move(a), 2, 13);
  };
  auto out = run(true, {}, ratio);
  ASSERT_EQ(out[1].dtype(), DType::kBool);
  double kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float xi = x.data<float>()[i], yi = out[0].data<float>()[i];
    if (out[1].data<bool>()[i]) {
      ASSERT_FLOAT_EQ(yi, static_cast<float>(xi * (1 / (1 - ratio)))) << i;
      ++kept;
    } else {
      ASSERT_EQ(yi, 0.f) << i;
    }
  }
  const double se = std::sqrt(ratio * (1 - ratio) / static_cast<double>(n));
  EXPECT_NEAR(kept / static_cast<double>(n), 1 - ratio, 5 * se);
  // A seed repeats the mask; without one two runs differ; not training is the identity.
  auto a = run(true, {attr_int("seed", 7)}, ratio), b = run(true, {attr_int("seed", 7)}, ratio);
  auto c = run(true, {}, ratio);
  int64_t same_seeded = 0, same_unseeded = 0;
  for (int64_t i = 0; i < n; ++i) {
    same_seeded += a[1].data<bool>()[i] == b[1].data<bool>()[i];
    same_unseeded += out[1].data<bool>()[i] == c[1].data<bool>()[i];
  }
  EXPECT_EQ(same_seeded, n);
  EXPECT_LT(same_unseeded, n);
  auto id = run(false, {}, ratio);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(id[0].data<float>()[i], x.data<float>()[i]);
    ASSERT_TRUE(id[1].data<bool>()[i]);
  }
  EXPECT_THROW(run(true, {}, 1.0), Error);  // ratio 1 would scale by infinity
}

TEST(OpsRandom, ASeedRepeatsTheDrawsAndNoSeedDoesNot) {
  Tensor probs = Tensor::from_vector<double>(std::vector<double>(256, 0.5), Shape{256});
  auto draw = [&](std::vector<Attribute> a) { return test::run_op("Bernoulli", {probs}, std::move(a), 1, 22)[0]; };
  Tensor a = draw({attr_float("seed", 3.f)}), b = draw({attr_float("seed", 3.f)});
  Tensor c = draw({}), d = draw({});
  int same_seeded = 0, same_unseeded = 0;
  for (int64_t i = 0; i < 256; ++i) {
    same_seeded += a.data<double>()[i] == b.data<double>()[i];
    same_unseeded += c.data<double>()[i] == d.data<double>()[i];
  }
  EXPECT_EQ(same_seeded, 256);
  EXPECT_LT(same_unseeded, 256);  // equal by chance with probability 2^-256
}

TEST(OpsRandom, UniformAndNormalHaveTheirMoments) {
  const int64_t n = 50000;
  Tensor u = test::run_op("RandomUniform", {}, {attr_ints("shape", {n}), attr_float("low", -2.f), attr_float("high", 4.f)},
                          1, 22)[0];
  double sum = 0, lo = 1e9, hi = -1e9;
  for (int64_t i = 0; i < n; ++i) {
    const double v = u.data<float>()[i];
    sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -2.0);
  EXPECT_LT(hi, 4.0);
  EXPECT_NEAR(sum / n, 1.0, 5 * 6 / std::sqrt(12.0 * n));  // uniform's sd: width / sqrt(12)
  Tensor like = Tensor::from_vector<double>(std::vector<double>(n, 0.0), Shape{n});
  Tensor g = test::run_op("RandomNormalLike", {like}, {attr_float("mean", 1.5f), attr_float("scale", 2.f)}, 1, 22)[0];
  ASSERT_EQ(g.dtype(), DType::kFloat64);
  double m = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) m += g.data<double>()[i];
  m /= n;
  for (int64_t i = 0; i < n; ++i) sq += std::pow(g.data<double>()[i] - m, 2);
  EXPECT_NEAR(m, 1.5, 5 * 2 / std::sqrt(double(n)));
  EXPECT_NEAR(std::sqrt(sq / n), 2.0, 0.05);
}

TEST(OpsRandom, MultinomialDrawsEachClassAtItsSoftmaxRate) {
  const int64_t n = 30000;
  Tensor logits = Tensor::from_vector<float>({0.f, 1.f, 2.f, 3.f, 3.f, -20.f}, Shape{2, 3});
  Tensor y = test::run_op("Multinomial", {logits}, {attr_int("sample_size", n), attr_int("dtype", 7)}, 1, 22)[0];
  ASSERT_EQ(y.dtype(), DType::kInt64);
  ASSERT_EQ(y.shape(), Shape({2, n}));
  for (int64_t b = 0; b < 2; ++b) {
    double z = 0;
    for (int c = 0; c < 3; ++c) z += std::exp(logits.data<float>()[b * 3 + c]);
    std::vector<double> count(3, 0);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t c = y.data<int64_t>()[b * n + k];
      ASSERT_TRUE(c >= 0 && c < 3) << c;
      ++count[c];
    }
    for (int c = 0; c < 3; ++c) {
      const double p = std::exp(logits.data<float>()[b * 3 + c]) / z;
      EXPECT_NEAR(count[c] / n, p, 5 * std::sqrt(p * (1 - p) / n) + 1e-9) << "row " << b << " class " << c;
    }
  }
}

}  // namespace

}  // namespace onyx
