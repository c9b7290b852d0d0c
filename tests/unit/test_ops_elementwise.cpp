// Elementwise ops against references computed here, in double, across dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "cpu/thread_pool.h"
#include "op_test_util.h"

namespace onyx {

namespace {

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;

// Random values suited to T: small integers (>= 1 for unsigned, so that the
// unsigned ops stay in range), normal-ish floats, or 0/1 for bool.
template <class T>
Tensor rand_of(Shape shape, double lo = -3, double hi = 3) {
  if constexpr (std::is_unsigned_v<T> && !std::is_same_v<T, bool>) return test::random_tensor<T>(shape, 1, 9);
  else return test::random_tensor<T>(shape, lo, hi);
}

// Replaces zeros (integers only) so that the tensor can be a divisor.
Tensor nonzero(Tensor t) {
  if (dtype_is_float(t.dtype())) return t;
  auto* p = static_cast<uint8_t*>(t.raw());
  const size_t w = dtype_size(t.dtype());
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.get_as_double(i) == 0) p[i * w] = 1;  // little-endian: the low byte carries the 1
  return t;
}

// The reference value as T would hold it, as a double.
template <class T>
double round_to(double v) {
  if constexpr (std::is_same_v<T, bool>) return v != 0;
  else if constexpr (kIsHalf<T>) return static_cast<float>(T(static_cast<float>(v)));
  else if constexpr (std::is_integral_v<T>) return static_cast<double>(static_cast<T>(static_cast<int64_t>(v)));
  else return static_cast<double>(static_cast<T>(v));
}

template <class T>
double tolerance(double ref) {
  double eps = 0;
  if constexpr (std::is_same_v<T, float>) eps = 1e-6;
  else if constexpr (std::is_same_v<T, double>) eps = 1e-12;
  else if constexpr (std::is_same_v<T, Float16>) eps = 1e-3;
  else if constexpr (std::is_same_v<T, BFloat16>) eps = 8e-3;
  return eps * std::max(1.0, std::abs(ref));
}

template <class T>
void expect_matches(const Tensor& out, const std::vector<double>& ref, const std::string& what) {
  ASSERT_EQ(out.dtype(), dtype_of<T>) << what;
  ASSERT_EQ(out.numel(), static_cast<int64_t>(ref.size())) << what;
  for (size_t i = 0; i < ref.size(); ++i) {
    double r = round_to<T>(ref[i]);
    double got = out.get_as_double(static_cast<int64_t>(i));
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(got)) << what << " at " << i;
    } else {
      EXPECT_NEAR(got, r, tolerance<T>(r)) << what << " at " << i;
    }
  }
}

// Numpy broadcasting of a [2,3,4] tensor with b of `b_shape`, done by hand:
// b's index along each axis is 0 where b has size 1.
std::vector<double> broadcast_ref(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape out = broadcast_shapes(a.shape(), b.shape());
  std::vector<double> ref;
  std::vector<int64_t> idx(out.rank(), 0);
  auto flat = [&](const Shape& s) {
    int64_t off = 0;
    for (size_t d = 0; d < s.rank(); ++d) {
      int64_t i = idx[out.rank() - s.rank() + d];
      off = off * s[d] + (s[d] == 1 ? 0 : i);
    }
    return off;
  };
  for (int64_t n = 0; n < out.numel(); ++n) {
    int64_t rem = n;
    for (size_t d = out.rank(); d-- > 0;) {
      idx[d] = rem % out[d];
      rem /= out[d];
    }
    ref.push_back(f(a.get_as_double(flat(a.shape())), b.get_as_double(flat(b.shape()))));
  }
  return ref;
}

// The shape pairs that take each path of the broadcast loop: equal shapes,
// a scalar on either side, and a general broadcast.
const std::vector<std::pair<Shape, Shape>> kShapePairs = {
    {Shape{2, 3, 4}, Shape{2, 3, 4}}, {Shape{2, 3, 4}, Shape{}}, {Shape{1}, Shape{2, 3, 4}},
    {Shape{2, 1, 4}, Shape{3, 1}},    {Shape{4}, Shape{2, 3, 1}}};

template <class T>
class ElementwiseArith : public ::testing::Test {};
using ArithTypes = ::testing::Types<float, double, Float16, BFloat16, int32_t, int64_t, uint8_t, int8_t>;
TYPED_TEST_SUITE(ElementwiseArith, ArithTypes);

template <class T>
void check_binary(const std::string& op, const std::function<double(double, double)>& f, bool divisor = false) {
  for (const auto& [sa, sb] : kShapePairs) {
    Tensor a = rand_of<T>(sa);
    Tensor b = rand_of<T>(sb);
    if (divisor) b = nonzero(b);
    auto out = test::run_op(op, {a, b});
    ASSERT_EQ(out[0].shape(), broadcast_shapes(sa, sb));
    expect_matches<T>(out[0], broadcast_ref(a, b, f), cat(op, " ", sa.str(), " ", sb.str()));
  }
}

TYPED_TEST(ElementwiseArith, AddSubMulAgainstReference) {
  using T = TypeParam;
  check_binary<T>("Add", [](double x, double y) { return x + y; });
  check_binary<T>("Mul", [](double x, double y) { return x * y; });
  if constexpr (!std::is_unsigned_v<T>) check_binary<T>("Sub", [](double x, double y) { return x - y; });
}

TYPED_TEST(ElementwiseArith, DivTruncatesIntegersTowardZero) {
  using T = TypeParam;
  check_binary<T>(
      "Div",
      [](double x, double y) { return std::is_integral_v<T> ? std::trunc(x / y) : x / y; }, true);
}

TYPED_TEST(ElementwiseArith, MaxMinAcrossThreeBroadcastInputs) {
  using T = TypeParam;
  Tensor a = rand_of<T>(Shape{2, 3, 4}), b = rand_of<T>(Shape{3, 1}), c = rand_of<T>(Shape{4});
  for (const char* op : {"Max", "Min"}) {
    bool is_max = std::string(op) == "Max";
    auto pick = [is_max](double x, double y) { return is_max ? std::max(x, y) : std::min(x, y); };
    auto out = test::run_op(op, {a, b, c});
    std::vector<double> ab = broadcast_ref(a, b, pick);
    Tensor abt(DType::kFloat64, Shape{2, 3, 4});
    for (size_t i = 0; i < ab.size(); ++i) abt.data<double>()[i] = ab[i];
    expect_matches<T>(out[0], broadcast_ref(abt, c, pick), op);
  }
}

TEST(ElementwiseArith, IntegerDivisionByZeroIsAnError) {
  Tensor a = Tensor::from_vector<int32_t>({4, 5, 6}, Shape{3});
  Tensor b = Tensor::from_vector<int32_t>({1, 0, 2}, Shape{3});
  for (const char* op : {"Div", "Mod"}) {
    try {
      test::run_op(op, {a, b});
      FAIL() << op << " by zero did not throw";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("by zero"), std::string::npos) << m;
      EXPECT_NE(m.find("node_under_test"), std::string::npos) << m;
    }
  }
  Tensor u = Tensor::from_vector<uint8_t>({7}, Shape{1});
  EXPECT_THROW(test::run_op("Div", {u, Tensor::scalar<uint8_t>(0)}), Error);
  // INT_MIN / -1 wraps instead of trapping.
  auto out = test::run_op("Div", {Tensor::scalar<int32_t>(std::numeric_limits<int32_t>::min()), Tensor::scalar<int32_t>(-1)});
  EXPECT_EQ(out[0].data<int32_t>()[0], std::numeric_limits<int32_t>::min());
}

TEST(ElementwiseArith, ModFollowsDivisorSignUnlessFmod) {
  Tensor a = Tensor::from_vector<int64_t>({-7, 7, -7, 7}, Shape{4});
  Tensor b = Tensor::from_vector<int64_t>({3, -3, -3, 3}, Shape{4});
  auto py = test::run_op("Mod", {a, b});
  EXPECT_EQ(std::vector<int64_t>(py[0].span<int64_t>().begin(), py[0].span<int64_t>().end()),
            (std::vector<int64_t>{2, -2, -1, 1}));
  auto c = test::run_op("Mod", {a, b}, {test::attr_int("fmod", 1)});
  EXPECT_EQ(std::vector<int64_t>(c[0].span<int64_t>().begin(), c[0].span<int64_t>().end()),
            (std::vector<int64_t>{-1, 1, -1, 1}));
  Tensor fa = Tensor::from_vector<float>({-7.5f, 7.5f}, Shape{2});
  Tensor fb = Tensor::from_vector<float>({2.0f, 2.0f}, Shape{2});
  auto f = test::run_op("Mod", {fa, fb}, {test::attr_int("fmod", 1)});
  EXPECT_FLOAT_EQ(f[0].data<float>()[0], -1.5f);
  EXPECT_FLOAT_EQ(f[0].data<float>()[1], 1.5f);
}

// Pow with every base type the spec allows and exponents of other types.
template <class T, class E>
void check_pow() {
  Tensor base = rand_of<T>(Shape{2, 3, 4}, 0.5, 3);
  // Integer bases: any sign with integer exponents; positive under fractional ones.
  if constexpr (std::is_integral_v<T>) base = rand_of<T>(Shape{2, 3, 4}, std::is_integral_v<E> ? -3 : 1, 3);
  Tensor exp = std::is_integral_v<E> ? test::random_tensor<E>(Shape{3, 1}, 0, 4) : rand_of<E>(Shape{3, 1}, -2, 2);
  auto out = test::run_op("Pow", {base, exp}, {}, 1, 15);
  auto ref = broadcast_ref(base, exp, [](double x, double y) {
    double p = std::pow(x, y);
    return std::is_integral_v<T> ? std::trunc(p) : p;
  });
  expect_matches<T>(out[0], ref, cat("Pow ", dtype_name(dtype_of<T>), "^", dtype_name(dtype_of<E>)));
}

TEST(ElementwiseArith, PowMixesBaseAndExponentTypes) {
  check_pow<float, float>();
  check_pow<float, int64_t>();
  check_pow<float, uint8_t>();
  check_pow<double, int32_t>();
  check_pow<Float16, Float16>();
  check_pow<Float16, float>();
  check_pow<BFloat16, BFloat16>();
  check_pow<int32_t, int32_t>();
  check_pow<int64_t, int64_t>();
  check_pow<int64_t, uint8_t>();
  check_pow<int32_t, float>();
}

template <class T>
Tensor small_whole(Shape shape) {
  Tensor ints = test::random_tensor<int64_t>(shape, 0, 2);
  Tensor t(dtype_of<T>, shape);
  for (int64_t i = 0; i < t.numel(); ++i) {
    auto v = ints.data<int64_t>()[i];
    if constexpr (kIsHalf<T>) t.data<T>()[i] = T(static_cast<float>(v));
    else t.data<T>()[i] = static_cast<T>(v);
  }
  return t;
}

template <class T>
class ElementwiseAnyType : public ::testing::Test {};
using AnyTypes = ::testing::Types<float, Float16, BFloat16, int32_t, int64_t, uint8_t, bool>;
TYPED_TEST_SUITE(ElementwiseAnyType, AnyTypes);

TYPED_TEST(ElementwiseAnyType, WhereBroadcastsThreeWays) {
  using T = TypeParam;
  Tensor cond = test::random_tensor<bool>(Shape{2, 1, 4});
  Tensor x = rand_of<T>(Shape{3, 1});
  Tensor y = rand_of<T>(Shape{2, 3, 4});
  auto out = test::run_op("Where", {cond, x, y});
  ASSERT_EQ(out[0].shape(), (Shape{2, 3, 4}));
  std::vector<double> ref;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k)
        ref.push_back(cond.data<bool>()[i * 4 + k] ? x.get_as_double(j) : y.get_as_double((i * 3 + j) * 4 + k));
  expect_matches<T>(out[0], ref, "Where");
  // Same shapes everywhere (the loop without index arithmetic).
  Tensor c2 = test::random_tensor<bool>(Shape{2, 3, 4});
  Tensor x2 = rand_of<T>(Shape{2, 3, 4});
  auto out2 = test::run_op("Where", {c2, x2, y});
  std::vector<double> ref2;
  for (int64_t i = 0; i < 24; ++i) ref2.push_back(c2.data<bool>()[i] ? x2.get_as_double(i) : y.get_as_double(i));
  expect_matches<T>(out2[0], ref2, "Where same shapes");
  // Attention's masking: a mask over the last two axes, scores, and a scalar beside them (the
  // scalar broadcast along every run); and the scalar first.
  Tensor c3 = test::random_tensor<bool>(Shape{1, 1, 3, 5});
  Tensor x3 = rand_of<T>(Shape{2, 3, 3, 5});
  Tensor s3 = rand_of<T>(Shape{});
  auto out3 = test::run_op("Where", {c3, x3, s3});
  auto out4 = test::run_op("Where", {c3, s3, x3});
  std::vector<double> ref3, ref4;
  for (int64_t i = 0; i < 90; ++i) {
    const bool keep = c3.data<bool>()[i % 15];
    ref3.push_back(keep ? x3.get_as_double(i) : s3.get_as_double(0));
    ref4.push_back(keep ? s3.get_as_double(0) : x3.get_as_double(i));
  }
  expect_matches<T>(out3[0], ref3, "Where mask, scores, scalar");
  expect_matches<T>(out4[0], ref4, "Where mask, scalar, scores");
}

TYPED_TEST(ElementwiseAnyType, ComparisonsGiveBool) {
  using T = TypeParam;
  for (const auto& [sa, sb] : kShapePairs) {
    // Small whole numbers, so that equal pairs occur.
    Tensor a = small_whole<T>(sa);
    Tensor b = small_whole<T>(sb);
    auto eq = test::run_op("Equal", {a, b}, {}, 1, 19);
    expect_matches<bool>(eq[0], broadcast_ref(a, b, [](double x, double y) { return x == y; }), "Equal");
    auto lt = test::run_op("Less", {a, b});
    expect_matches<bool>(lt[0], broadcast_ref(a, b, [](double x, double y) { return x < y; }), "Less");
    auto ge = test::run_op("GreaterOrEqual", {a, b});
    expect_matches<bool>(ge[0], broadcast_ref(a, b, [](double x, double y) { return x >= y; }), "GreaterOrEqual");
  }
}

TEST(ElementwiseStrings, EqualAndWhereOnStrings) {
  Tensor a = Tensor::from_vector<std::string>({"a", "bc", ""}, Shape{3});
  Tensor b = Tensor::from_vector<std::string>({"bc"}, Shape{1});
  auto eq = test::run_op("Equal", {a, b}, {}, 1, 19);
  EXPECT_EQ(std::vector<bool>(eq[0].span<bool>().begin(), eq[0].span<bool>().end()),
            (std::vector<bool>{false, true, false}));
  Tensor c = Tensor::from_vector<bool>({true, false, true}, Shape{3});
  auto w = test::run_op("Where", {c, a, b});
  EXPECT_EQ(w[0].data<std::string>()[0], "a");
  EXPECT_EQ(w[0].data<std::string>()[1], "bc");
  EXPECT_EQ(w[0].data<std::string>()[2], "");
}

// ---- Cast ----

template <class D>
double cast_ref(double v) {
  if constexpr (std::is_same_v<D, bool>) return v != 0;
  else if constexpr (std::is_integral_v<D>) return static_cast<double>(static_cast<D>(static_cast<int64_t>(std::trunc(v))));
  else return v;  // round_to<D> rounds it to D
}

template <class S, class D>
void check_cast() {
  Tensor x = std::is_unsigned_v<S> ? test::random_tensor<S>(Shape{3, 5}, 0, 200) : rand_of<S>(Shape{3, 5}, -4, 4);
  auto out = test::run_op("Cast", {x}, {test::attr_int("to", static_cast<int64_t>(dtype_of<D>))}, 1, 19);
  std::vector<double> ref;
  for (int64_t i = 0; i < x.numel(); ++i) ref.push_back(cast_ref<D>(x.get_as_double(i)));
  expect_matches<D>(out[0], ref,
                    cat("Cast ", dtype_name(dtype_of<S>), " -> ", dtype_name(dtype_of<D>)));
  // CastLike takes the target type from its second input.
  auto like = test::run_op("CastLike", {x, Tensor(dtype_of<D>, Shape{1})}, {}, 1, 19);
  expect_matches<D>(like[0], ref, "CastLike");
}

template <class S, class... Ds>
void check_cast_from() {
  (check_cast<S, Ds>(), ...);
}

template <class... Ss>
void check_cast_matrix() {
  (check_cast_from<Ss, float, double, Float16, BFloat16, int32_t, int64_t, uint8_t, int8_t, bool>(), ...);
}

TEST(ElementwiseCast, EveryPairOfNumericTypes) {
  check_cast_matrix<float, double, Float16, BFloat16, int32_t, int64_t, uint8_t, int8_t, bool>();
}

TEST(ElementwiseCast, HalfPrecisionRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between two float16 values: ties go to the even one (1.0);
  // 1 + 3*2^-11 ties up to 1 + 2^-9.
  Tensor x = Tensor::from_vector<float>({1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 1e-8f}, Shape{4});
  auto h = test::run_op("Cast", {x}, {test::attr_int("to", 10)});
  EXPECT_EQ(static_cast<float>(h[0].data<Float16>()[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(h[0].data<Float16>()[1]), 1.0f + 0x1p-9f);
  EXPECT_TRUE(std::isinf(static_cast<float>(h[0].data<Float16>()[2])));
  EXPECT_EQ(static_cast<float>(h[0].data<Float16>()[3]), 0.0f);
  Tensor y = Tensor::from_vector<float>({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f}, Shape{2});
  auto b = test::run_op("Cast", {y}, {test::attr_int("to", 16)});
  EXPECT_EQ(static_cast<float>(b[0].data<BFloat16>()[0]), 1.0f);
  EXPECT_EQ(static_cast<float>(b[0].data<BFloat16>()[1]), 1.0f + 0x1p-6f);
}

TEST(ElementwiseCast, FloatToIntTruncatesTowardZero) {
  Tensor x = Tensor::from_vector<float>({-2.7f, -0.5f, 0.5f, 2.7f, 1e10f}, Shape{5});
  auto out = test::run_op("Cast", {x}, {test::attr_int("to", 7)});
  const int64_t* p = out[0].data<int64_t>();
  EXPECT_EQ(p[0], -2);
  EXPECT_EQ(p[1], 0);
  EXPECT_EQ(p[2], 0);
  EXPECT_EQ(p[3], 2);
  EXPECT_EQ(p[4], 10000000000);
}

TEST(ElementwiseCast, NumbersToStringsAsTheReferenceFormatsThem) {
  // numpy 2 prints float32 positionally for 1e-4 <= |x| < 1e6 only; float32(0.0001) is just below 1e-4.
  Tensor x = Tensor::from_vector<float>(
      {1.0f, 0.1f, -0.25f, 1e-5f, 1.5e16f, 123456.0f, NAN, -INFINITY, 0.0001f, 3.4028235e38f, 1e6f, 999999.94f},
      Shape{12});
  auto out = test::run_op("Cast", {x}, {test::attr_int("to", 8)});
  std::vector<std::string> expect = {"1.0",  "0.1",  "-0.25", "1e-05",         "1.5e+16", "123456.0",
                                     "nan",  "-inf", "1e-04", "3.4028235e+38", "1e+06",   "999999.94"};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(out[0].data<std::string>()[i], expect[i]) << i;
  auto ints = test::run_op("Cast", {Tensor::from_vector<int32_t>({-42, 7}, Shape{2})}, {test::attr_int("to", 8)});
  EXPECT_EQ(ints[0].data<std::string>()[0], "-42");
  EXPECT_EQ(ints[0].data<std::string>()[1], "7");
  auto half = test::run_op("Cast", {Tensor::from_vector<Float16>({Float16(0.1f)}, Shape{1})}, {test::attr_int("to", 8)});
  EXPECT_EQ(half[0].data<std::string>()[0], "0.1");
  auto dbl = test::run_op("Cast", {Tensor::from_vector<double>({0.0001, 1e15, 1e16}, Shape{3})}, {test::attr_int("to", 8)});
  EXPECT_EQ(dbl[0].data<std::string>()[0], "0.0001");
  EXPECT_EQ(dbl[0].data<std::string>()[1], "1000000000000000.0");
  EXPECT_EQ(dbl[0].data<std::string>()[2], "1e+16");
  auto flags = test::run_op("Cast", {Tensor::from_vector<bool>({true, false}, Shape{2})}, {test::attr_int("to", 8)});
  EXPECT_EQ(flags[0].data<std::string>()[0], "True");
}

TEST(ElementwiseCast, StringsToNumbers) {
  Tensor s = Tensor::from_vector<std::string>({"1.5", "NaN", "INF", "-INF", "inf", "-2e3", " 7 "}, Shape{7});
  auto f = test::run_op("Cast", {s}, {test::attr_int("to", 1)});
  const float* p = f[0].data<float>();
  EXPECT_EQ(p[0], 1.5f);
  EXPECT_TRUE(std::isnan(p[1]));
  EXPECT_EQ(p[2], INFINITY);
  EXPECT_EQ(p[3], -INFINITY);
  EXPECT_EQ(p[4], INFINITY);
  EXPECT_EQ(p[5], -2000.0f);
  EXPECT_EQ(p[6], 7.0f);
  auto i = test::run_op("Cast", {Tensor::from_vector<std::string>({"42", "-7", "+3"}, Shape{3})},
                        {test::attr_int("to", 7)});
  EXPECT_EQ(i[0].data<int64_t>()[0], 42);
  EXPECT_EQ(i[0].data<int64_t>()[1], -7);
  EXPECT_EQ(i[0].data<int64_t>()[2], 3);
  EXPECT_THROW(test::run_op("Cast", {Tensor::from_vector<std::string>({"abc"}, Shape{1})}, {test::attr_int("to", 1)}),
               Error);
}

// ---- unary ----

TEST(ElementwiseUnary, MathAndActivationsAgainstReference) {
  struct Case {
    const char* op;
    std::function<double(double)> f;
    std::vector<Attribute> attrs;
    int opset = 18;
  };
  auto sig = [](double x) { return 1 / (1 + std::exp(-x)); };
  std::vector<Case> cases = {
      {"Exp", [](double x) { return std::exp(x); }, {}},
      {"Tanh", [](double x) { return std::tanh(x); }, {}},
      {"Erf", [](double x) { return std::erf(x); }, {}},
      {"Sigmoid", sig, {}},
      {"Relu", [](double x) { return std::max(0.0, x); }, {}},
      {"LeakyRelu", [](double x) { return x < 0 ? 0.1 * x : x; }, {test::attr_float("alpha", 0.1f)}},
      {"Elu", [](double x) { return x < 0 ? 2 * (std::exp(x) - 1) : x; }, {test::attr_float("alpha", 2.0f)}},
      {"Softplus", [](double x) { return std::log1p(std::exp(x)); }, {}},
      {"HardSwish", [](double x) { return x * std::clamp(x / 6 + 0.5, 0.0, 1.0); }, {}},
      {"Mish", [](double x) { return x * std::tanh(std::log1p(std::exp(x))); }, {}},
      {"Gelu", [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }, {}, 20},
      {"Gelu",
       [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x))); },
       {test::attr_string("approximate", "tanh")},
       20},
      {"Swish", [sig](double x) { return x * sig(0.5 * x); }, {test::attr_float("alpha", 0.5f)}, 24},
      {"Round", [](double x) { return std::nearbyint(x); }, {}},
      {"Sign", [](double x) { return static_cast<double>((x > 0) - (x < 0)); }, {}},
      {"Shrink", [](double x) { return x < -1 ? x + 0.5 : (x > 1 ? x - 0.5 : 0); },
       {test::attr_float("lambd", 1.0f), test::attr_float("bias", 0.5f)}},
  };
  for (const auto& c : cases) {
    Tensor x = test::random_tensor<float>(Shape{4, 5});
    auto out = test::run_op(c.op, {x}, c.attrs, 1, c.opset);
    std::vector<double> ref;
    for (int64_t i = 0; i < x.numel(); ++i) ref.push_back(c.f(x.get_as_double(i)));
    expect_matches<float>(out[0], ref, c.op);
    // The 16-bit floats compute in float and round once.
    Tensor h = test::random_tensor<Float16>(Shape{4, 5});
    auto hout = test::run_op(c.op, {h}, c.attrs, 1, c.opset);
    std::vector<double> href;
    for (int64_t i = 0; i < h.numel(); ++i) href.push_back(c.f(h.get_as_double(i)));
    expect_matches<Float16>(hout[0], href, cat(c.op, " float16"));
  }
}

TEST(ElementwiseUnary, RoundHalfToEven) {
  Tensor x = Tensor::from_vector<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.4f}, Shape{6});
  auto out = test::run_op("Round", {x});
  std::vector<float> expect = {0, 2, 2, -0.0f, -2, 2};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(out[0].data<float>()[i], expect[i]) << i;
}

TEST(ElementwiseUnary, ClipIntegersWithOptionalBounds) {
  Tensor x = Tensor::from_vector<int32_t>({-5, -1, 0, 3, 9}, Shape{5});
  auto both = test::run_op("Clip", {x, Tensor::scalar<int32_t>(-2), Tensor::scalar<int32_t>(4)}, {}, 1, 13);
  EXPECT_EQ(std::vector<int32_t>(both[0].span<int32_t>().begin(), both[0].span<int32_t>().end()),
            (std::vector<int32_t>{-2, -1, 0, 3, 4}));
  auto hi_only = test::run_op("Clip", {x, Tensor(), Tensor::scalar<int32_t>(1)}, {}, 1, 13);
  EXPECT_EQ(std::vector<int32_t>(hi_only[0].span<int32_t>().begin(), hi_only[0].span<int32_t>().end()),
            (std::vector<int32_t>{-5, -1, 0, 1, 1}));
  // Before opset 11 the bounds are attributes.
  Tensor f = Tensor::from_vector<float>({-3.0f, 0.5f, 3.0f}, Shape{3});
  auto old = test::run_op("Clip", {f}, {test::attr_float("min", -1.0f), test::attr_float("max", 1.0f)}, 1, 6);
  EXPECT_EQ(old[0].data<float>()[0], -1.0f);
  EXPECT_EQ(old[0].data<float>()[1], 0.5f);
  EXPECT_EQ(old[0].data<float>()[2], 1.0f);
}

TEST(ElementwiseUnary, IsInfHonoursDirections) {
  Tensor x = Tensor::from_vector<float>({-INFINITY, INFINITY, NAN, 1.0f}, Shape{4});
  auto neg = test::run_op("IsInf", {x}, {test::attr_int("detect_positive", 0)});
  EXPECT_EQ(std::vector<bool>(neg[0].span<bool>().begin(), neg[0].span<bool>().end()),
            (std::vector<bool>{true, false, false, false}));
  auto nan = test::run_op("IsNaN", {x});
  EXPECT_EQ(std::vector<bool>(nan[0].span<bool>().begin(), nan[0].span<bool>().end()),
            (std::vector<bool>{false, false, true, false}));
}

TEST(ElementwiseUnary, DropoutIsIdentityAndRejectsABadRatio) {
  Tensor x = test::random_tensor<float>(Shape{3, 4});
  auto out = test::run_op("Dropout", {x}, {}, 2, 13);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(out[0].data<float>()[i], x.data<float>()[i]);
  ASSERT_EQ(out[1].dtype(), DType::kBool);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_TRUE(out[1].data<bool>()[i]);
  // Training mode (tests/unit/test_ops_random.cpp) needs a ratio in [0, 1).
  try {
    test::run_op("Dropout", {x, Tensor::scalar<float>(-0.5f), Tensor::scalar<bool>(true)}, {}, 1, 13);
    FAIL() << "a negative ratio did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ratio must be in [0, 1), got -0.5"), std::string::npos) << e.what();
  }
}

TEST(ElementwiseLogical, BitwiseAndShifts) {
  Tensor a = Tensor::from_vector<uint8_t>({0xF0, 0x0F, 0xFF}, Shape{3});
  Tensor b = Tensor::from_vector<uint8_t>({0x3C, 0x3C, 0x01}, Shape{3});
  EXPECT_EQ(test::run_op("BitwiseAnd", {a, b})[0].data<uint8_t>()[0], 0x30);
  EXPECT_EQ(test::run_op("BitwiseXor", {a, b})[0].data<uint8_t>()[2], 0xFE);
  EXPECT_EQ(test::run_op("BitwiseNot", {a})[0].data<uint8_t>()[1], 0xF0);
  Tensor s = Tensor::from_vector<uint8_t>({1, 4, 9}, Shape{3});
  auto left = test::run_op("BitShift", {a, s}, {test::attr_string("direction", "LEFT")});
  EXPECT_EQ(left[0].data<uint8_t>()[0], 0xE0);
  EXPECT_EQ(left[0].data<uint8_t>()[1], 0xF0);
  EXPECT_EQ(left[0].data<uint8_t>()[2], 0);  // shifted past the width
  auto right = test::run_op("BitShift", {a, s}, {test::attr_string("direction", "RIGHT")});
  EXPECT_EQ(right[0].data<uint8_t>()[0], 0x78);
  Tensor p = Tensor::from_vector<bool>({true, true, false}, Shape{3});
  Tensor q = Tensor::from_vector<bool>({true, false, false}, Shape{3});
  auto x = test::run_op("Xor", {p, q});
  EXPECT_EQ(std::vector<bool>(x[0].span<bool>().begin(), x[0].span<bool>().end()), (std::vector<bool>{false, true, false}));
}

TEST(OpsElementwise, PerChannelFactorsSplitOverThePoolMatchFloat64) {
  // A [C, 1, 1] factor onto [N, C, H, W] (squeeze-and-excitation's scale) on either side, and a
  // [C] x [C, 1] pair whose blocks are single rows: large enough that the blocks split over the
  // pool; each output against float64, at 1 to 3 threads, and an integer divisor of zero still
  // throws from a chunk.
  Tensor x = test::random_tensor<float>(Shape{2, 120, 28, 28});
  Tensor s = test::random_tensor<float>(Shape{1, 120, 1, 1});
  const int64_t hw = 28 * 28;
  for (int threads : {1, 2, 3}) {
    cpu::ThreadPool pool(threads);
    cpu::PoolScope scope(&pool);
    SCOPED_TRACE("threads " + std::to_string(threads));
    auto xs = test::run_op("Mul", {x, s});
    auto sx = test::run_op("Sub", {s, x});
    ASSERT_EQ(xs[0].shape(), x.shape());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double f = s.get_as_double((i / hw) % 120), v = x.get_as_double(i);
      ASSERT_EQ(xs[0].get_as_double(i), static_cast<double>(static_cast<float>(v * f))) << "at " << i;
      ASSERT_EQ(sx[0].get_as_double(i), static_cast<double>(static_cast<float>(f - v))) << "at " << i;
    }
    Tensor num = test::random_tensor<int32_t>(Shape{64, 1024}, 1, 9);
    Tensor den = test::random_tensor<int32_t>(Shape{64, 1}, 1, 9);
    den.data<int32_t>()[37] = 0;
    EXPECT_THROW(test::run_op("Div", {num, den}), std::exception);
  }
}

}  // namespace

}  // namespace onyx
