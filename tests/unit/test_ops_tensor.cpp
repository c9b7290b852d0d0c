// Tensor-family ops (views, makers, layout, slicing, padding, gather/scatter, TopK,
// Unique) against plain reference loops written here.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

#include "cpu/thread_pool.h"
#include "op_test_util.h"

namespace onyx {
namespace {

using test::attr_int;
using test::attr_ints;
using test::attr_string;
using test::run_op;
using test::compute_op;

// Random tensor of any element type; strings are short random words.
template <class T>
Tensor rnd(Shape s, double lo = -3, double hi = 3) {
  if constexpr (std::is_same_v<T, std::string>) {
    Tensor t(DType::kString, std::move(s));
    for (auto& v : t.span<std::string>())
      v = std::to_string(std::uniform_int_distribution<int>(0, 9999)(test::rng())) + 's';
    return t;
  } else {
    return test::random_tensor<T>(std::move(s), lo, hi);
  }
}

Tensor i64(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, Shape{static_cast<int64_t>(v.size())}); }

// Row-major coordinates of flat index i, and back.
std::vector<int64_t> unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> c(s.rank());
  for (size_t a = s.rank(); a-- > 0;) {
    c[a] = i % s[a];
    i /= s[a];
  }
  return c;
}
int64_t ravel(const std::vector<int64_t>& c, const Shape& s) {
  int64_t i = 0;
  for (size_t a = 0; a < s.rank(); ++a) i = i * s[a] + c[a];
  return i;
}

template <class T>
T at(const Tensor& t, const std::vector<int64_t>& c) {
  return t.data<T>()[ravel(c, t.shape())];
}

// Expects `fn` to throw an onyx::Error whose text contains every one of `parts`.
template <class Fn>
void expect_error(Fn fn, std::vector<std::string> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  }
}

template <class T>
class TensorOpsTyped : public ::testing::Test {};
using MoveTypes = ::testing::Types<float, int64_t, bool, std::string>;
TYPED_TEST_SUITE(TensorOpsTyped, MoveTypes);

// ---- views ----------------------------------------------------------------

TEST(TensorOps, ReshapeSqueezeUnsqueezeFlattenShareStorage) {
  Tensor x = rnd<float>(Shape{2, 1, 3, 1});
  auto check = [&](const Tensor& out, const Shape& want) {
    EXPECT_EQ(out.shape(), want);
    EXPECT_TRUE(out.shares_storage_with(x));
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(out.data<float>()[i], x.data<float>()[i]);
  };
  check(compute_op("Reshape", {x, i64({3, 0, -1})})[0], Shape{3, 1, 2});
  check(compute_op("Squeeze", {x, i64({1, -1})}, {}, 1, 13)[0], Shape{2, 3});
  check(compute_op("Squeeze", {x}, {}, 1, 13)[0], Shape{2, 3});
  check(compute_op("Squeeze", {x}, {attr_ints("axes", {3})}, 1, 11)[0], Shape{2, 1, 3});
  check(compute_op("Unsqueeze", {x, i64({0, -1})}, {}, 1, 13)[0], Shape{1, 2, 1, 3, 1, 1});
  check(compute_op("Unsqueeze", {x}, {attr_ints("axes", {2})}, 1, 11)[0], Shape{2, 1, 1, 3, 1});
  check(compute_op("Flatten", {x}, {attr_int("axis", 2)})[0], Shape{2, 3});
  check(compute_op("Identity", {x})[0], Shape{2, 1, 3, 1});
}

TEST(TensorOps, SqueezeOfNonUnitAxisIsAnError) {
  expect_error([] { run_op("Squeeze", {rnd<float>(Shape{2, 3}), i64({1})}, {}, 1, 13); }, {"squeeze axis 1", "3"});
}

// ---- Shape, Size, Constant, ConstantOfShape, Range, EyeLike, OneHot ---------

TEST(TensorOps, ShapeWithStartEndAndSize) {
  Tensor x = rnd<float>(Shape{2, 3, 4, 5});
  EXPECT_EQ(run_op("Shape", {x})[0].to_int64_vector(), (std::vector<int64_t>{2, 3, 4, 5}));
  auto s = run_op("Shape", {x}, {attr_int("start", 1), attr_int("end", -1)}, 1, 15)[0];
  EXPECT_EQ(s.to_int64_vector(), (std::vector<int64_t>{3, 4}));
  s = run_op("Shape", {x}, {attr_int("start", -10), attr_int("end", 100)}, 1, 15)[0];
  EXPECT_EQ(s.to_int64_vector(), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(run_op("Shape", {x}, {attr_int("start", 3), attr_int("end", 1)}, 1, 15)[0].numel(), 0);
  auto n = run_op("Size", {x})[0];
  EXPECT_EQ(n.rank(), 0u);
  EXPECT_EQ(n.data<int64_t>()[0], 120);
}

TEST(TensorOps, ConstantFromEachAttributeKind) {
  auto out = run_op("Constant", {}, {attr_ints("value_ints", {4, -2, 7})})[0];
  EXPECT_EQ(out.to_int64_vector(), (std::vector<int64_t>{4, -2, 7}));
  out = run_op("Constant", {}, {test::attr_float("value_float", 2.5f)})[0];
  EXPECT_EQ(out.rank(), 0u);
  EXPECT_EQ(out.data<float>()[0], 2.5f);
  out = run_op("Constant", {}, {attr_string("value_string", "hello")})[0];
  EXPECT_EQ(out.data<std::string>()[0], "hello");
  Attribute a;
  a.name = "value";
  a.kind = Attribute::Kind::kTensor;
  a.t = rnd<int64_t>(Shape{2, 3}, -100, 100);
  out = run_op("Constant", {}, {a})[0];
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_EQ(out.to_int64_vector(), a.t.to_int64_vector());
}

TEST(TensorOps, ConstantOfShapeFillsWithTheValue) {
  Attribute a;
  a.name = "value";
  a.kind = Attribute::Kind::kTensor;
  a.t = Tensor::from_vector<int32_t>({-7}, Shape{1});
  auto out = run_op("ConstantOfShape", {i64({2, 3})}, {a})[0];
  ASSERT_EQ(out.dtype(), DType::kInt32);
  ASSERT_EQ(out.shape(), (Shape{2, 3}));
  for (int32_t v : out.span<int32_t>()) EXPECT_EQ(v, -7);
  out = run_op("ConstantOfShape", {i64({4})})[0];
  ASSERT_EQ(out.dtype(), DType::kFloat32);
  for (float v : out.span<float>()) EXPECT_EQ(v, 0.f);
}

template <class T>
void check_range(T start, T limit, T delta) {
  std::vector<T> want;
  for (T v = start; delta > 0 ? v < limit : v > limit; v = static_cast<T>(v + delta)) want.push_back(v);
  Tensor out = run_op("Range", {Tensor::scalar<T>(start), Tensor::scalar<T>(limit), Tensor::scalar<T>(delta)})[0];
  ASSERT_EQ(out.dtype(), dtype_of<T>);
  ASSERT_EQ(out.shape(), (Shape{static_cast<int64_t>(want.size())})) << start << " " << limit << " " << delta;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out.data<T>()[i], want[i]) << i;
}

TEST(TensorOps, RangeOverInt32Int64FloatDouble) {
  auto& g = test::rng();
  std::uniform_int_distribution<int> pick(-40, 40), step(1, 7);
  for (int rep = 0; rep < 20; ++rep) {
    int s = pick(g), l = pick(g), d = step(g) * (rep % 2 ? -1 : 1);
    check_range<int32_t>(s, l, d);
    check_range<int64_t>(s * 1000000000LL, l * 1000000000LL, d * 1000000000LL);
    // Multiples of 1/4 are exact in binary, so the reference's running sum is exact too.
    check_range<float>(s / 4.f, l / 4.f, d / 4.f);
    check_range<double>(s / 4.0, l / 4.0, d / 4.0);
  }
  check_range<int32_t>(5, 5, 1);  // empty
  expect_error(
      [] {
        run_op("Range", {Tensor::scalar<int32_t>(0), Tensor::scalar<int32_t>(5), Tensor::scalar<int32_t>(0)});
      },
      {"delta"});
}

TEST(TensorOps, EyeLikeWithOffsetAndDtype) {
  Tensor x = rnd<float>(Shape{4, 6});
  auto out = run_op("EyeLike", {x}, {attr_int("k", 2), attr_int("dtype", 7)}, 1, 9)[0];
  ASSERT_EQ(out.dtype(), DType::kInt64);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(at<int64_t>(out, {i, j}), j == i + 2 ? 1 : 0);
}

TEST(TensorOps, OneHotWithAxisAndNegativeIndices) {
  Tensor ind = rnd<int64_t>(Shape{2, 3}, -5, 4);
  Tensor values = Tensor::from_vector<float>({-1.5f, 4.f}, Shape{2});
  auto out = run_op("OneHot", {ind, Tensor::scalar<int64_t>(5), values}, {attr_int("axis", 1)}, 1, 11)[0];
  ASSERT_EQ(out.shape(), (Shape{2, 5, 3}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t d = 0; d < 5; ++d)
      for (int64_t j = 0; j < 3; ++j) {
        int64_t v = at<int64_t>(ind, {i, j});
        EXPECT_EQ(at<float>(out, {i, d, j}), (v + 5) % 5 == d ? 4.f : -1.5f);
      }
}

// ---- Concat, Split, Transpose ---------------------------------------------

TYPED_TEST(TensorOpsTyped, ConcatWithNegativeAxisAndEmptyInput) {
  using T = TypeParam;
  Tensor a = rnd<T>(Shape{2, 3, 4}), b = rnd<T>(Shape{2, 1, 4}), c = rnd<T>(Shape{2, 0, 4});
  auto out = run_op("Concat", {a, c, b}, {attr_int("axis", -2)})[0];
  ASSERT_EQ(out.shape(), (Shape{2, 4, 4}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 4; ++k)
        EXPECT_EQ(at<T>(out, {i, j, k}), j < 3 ? at<T>(a, {i, j, k}) : at<T>(b, {i, j - 3, k}));
}

TYPED_TEST(TensorOpsTyped, SliceWithNegativeStepsAndExtremeEnds) {
  using T = TypeParam;
  Tensor x = rnd<T>(Shape{5, 6, 7});
  const int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  auto out = run_op("Slice", {x, i64({-1, 1}), i64({kMin, kMax}), i64({0, -1}), i64({-2, 3})}, {}, 1, 13)[0];
  // Axis 0: 4, 2, 0; axis 2: 1, 4; axis 1 whole.
  const std::vector<int64_t> i0 = {4, 2, 0}, i2 = {1, 4};
  ASSERT_EQ(out.shape(), (Shape{3, 6, 2}));
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 6; ++b)
      for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(at<T>(out, {a, b, c}), at<T>(x, {i0[a], b, i2[c]}));
  // Opset 1 attributes; out-of-range starts clamp to an empty result.
  out = run_op("Slice", {x}, {attr_ints("starts", {1, 9}), attr_ints("ends", {3, 12}), attr_ints("axes", {0, 2})}, 1,
               1)[0];
  EXPECT_EQ(out.shape(), (Shape{2, 6, 0}));
}

TYPED_TEST(TensorOpsTyped, TransposeWithPermAndDefault) {
  using T = TypeParam;
  Tensor x = rnd<T>(Shape{2, 3, 4});
  auto out = run_op("Transpose", {x}, {attr_ints("perm", {1, 2, 0})})[0];
  ASSERT_EQ(out.shape(), (Shape{3, 4, 2}));
  auto rev = run_op("Transpose", {x})[0];
  ASSERT_EQ(rev.shape(), (Shape{4, 3, 2}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        EXPECT_EQ(at<T>(out, {j, k, i}), at<T>(x, {i, j, k}));
        EXPECT_EQ(at<T>(rev, {k, j, i}), at<T>(x, {i, j, k}));
      }
}

// From 32K elements the copy's rows are split over the intra-op pool: each chunk starts at a row
// of its own, its input offset found from that row's index. Compared element by element at 1-3
// threads, with row counts no thread count divides and a reversed axis.
TYPED_TEST(TensorOpsTyped, LargeTransposeAndReversedSliceOverThreads) {
  using T = TypeParam;
  Tensor x = rnd<T>(Shape{37, 29, 41});
  const int64_t kMin = std::numeric_limits<int64_t>::min();
  for (int threads : {1, 2, 3}) {
    cpu::ThreadPool pool(threads);
    cpu::PoolScope scope(&pool);
    auto t = run_op("Transpose", {x}, {attr_ints("perm", {2, 0, 1})})[0];
    ASSERT_EQ(t.shape(), (Shape{41, 37, 29}));
    auto r = run_op("Slice", {x, i64({-1, 0}), i64({kMin, 41}), i64({0, 2}), i64({-1, 1})}, {}, 1, 13)[0];
    ASSERT_EQ(r.shape(), (Shape{37, 29, 41}));
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t j = 0; j < 29; ++j)
        for (int64_t k = 0; k < 41; ++k) {
          ASSERT_EQ(at<T>(t, {k, i, j}), at<T>(x, {i, j, k})) << threads << " threads at " << i << "," << j << "," << k;
          ASSERT_EQ(at<T>(r, {i, j, k}), at<T>(x, {36 - i, j, k})) << threads << " threads at " << i << "," << j << ","
                                                                    << k;
        }
  }
}

// Concat splits its outer index over the intra-op pool (spans of at least 64 KiB of output), each
// span copying every input's blocks: a decode step's past and new caches along the position axis
// (an outer of 37 rows no thread count divides) and a middle axis, compared element by element at
// 1-3 threads.
TYPED_TEST(TensorOpsTyped, LargeConcatOverThreads) {
  using T = TypeParam;
  Tensor past = rnd<T>(Shape{37, 300, 24}), fresh = rnd<T>(Shape{37, 1, 24}), more = rnd<T>(Shape{37, 5, 24});
  for (int threads : {1, 2, 3}) {
    cpu::ThreadPool pool(threads);
    cpu::PoolScope scope(&pool);
    auto y = run_op("Concat", {past, fresh, more}, {attr_int("axis", 1)})[0];
    ASSERT_EQ(y.shape(), (Shape{37, 306, 24}));
    for (int64_t i = 0; i < 37; ++i)
      for (int64_t j = 0; j < 306; ++j)
        for (int64_t k = 0; k < 24; ++k) {
          const T want = j < 300 ? at<T>(past, {i, j, k}) : j == 300 ? at<T>(fresh, {i, 0, k}) : at<T>(more, {i, j - 301, k});
          ASSERT_EQ(at<T>(y, {i, j, k}), want) << threads << " threads at " << i << "," << j << "," << k;
        }
  }
}

TEST(TensorOps, SplitInputsAttributesAndUnevenNumOutputs) {
  Tensor x = rnd<int64_t>(Shape{3, 7}, -100, 100);
  auto check = [&](const std::vector<Tensor>& outs, const std::vector<int64_t>& sizes) {
    ASSERT_EQ(outs.size(), sizes.size());
    int64_t at0 = 0;
    for (size_t o = 0; o < outs.size(); ++o) {
      ASSERT_EQ(outs[o].shape(), (Shape{3, sizes[o]}));
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < sizes[o]; ++j) EXPECT_EQ(at<int64_t>(outs[o], {i, j}), at<int64_t>(x, {i, at0 + j}));
      at0 += sizes[o];
    }
  };
  check(run_op("Split", {x}, {attr_int("axis", 1), attr_int("num_outputs", 3)}, 3, 18), {3, 3, 1});
  check(run_op("Split", {x, i64({2, 0, 5})}, {attr_int("axis", -1)}, 3, 13), {2, 0, 5});
  check(run_op("Split", {x}, {attr_int("axis", 1), attr_ints("split", {4, 3})}, 2, 11), {4, 3});
  expect_error([&] { run_op("Split", {x, i64({2, 2})}, {attr_int("axis", 1)}, 2, 13); }, {"sum to 4", "size 7"});
  expect_error([&] { run_op("Split", {x}, {attr_int("axis", 1)}, 2, 13); }, {"evenly"});
}

// ---- Expand, Tile, Pad, Trilu, DepthToSpace, SpaceToDepth ----------------

TEST(TensorOps, ExpandBroadcastsBothWays) {
  Tensor x = rnd<float>(Shape{3, 1});
  auto out = run_op("Expand", {x, i64({2, 1, 4})})[0];
  ASSERT_EQ(out.shape(), (Shape{2, 3, 4}));
  for (int64_t i = 0; i < 24; ++i) {
    auto c = unravel(i, out.shape());
    EXPECT_EQ(out.data<float>()[i], at<float>(x, {c[1], 0}));
  }
}

TEST(TensorOps, TileRepeatsEachAxis) {
  Tensor x = rnd<std::string>(Shape{2, 3});
  auto out = run_op("Tile", {x, i64({3, 2})})[0];
  ASSERT_EQ(out.shape(), (Shape{6, 6}));
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 6; ++j) EXPECT_EQ(at<std::string>(out, {i, j}), at<std::string>(x, {i % 2, j % 3}));
}

// Reference source coordinate for padding, by repeated folding (not a closed form).
int64_t ref_pad_src(int64_t c, int64_t d, const std::string& mode) {
  if (c >= 0 && c < d) return c;
  if (mode == "constant") return -1;
  if (mode == "edge") return std::clamp<int64_t>(c, 0, d - 1);
  if (mode == "wrap") {
    while (c < 0) c += d;
    while (c >= d) c -= d;
    return c;
  }
  while (c < 0 || c >= d) {  // reflect
    if (c < 0) c = -c;
    if (c >= d) c = 2 * (d - 1) - c;
  }
  return c;
}

TEST(TensorOps, PadAllModesAgainstReference) {
  Tensor x = rnd<int32_t>(Shape{3, 4}, -50, 50);
  const std::vector<int64_t> pads = {2, -1, 3, 5};  // begin0, begin1, end0, end1
  for (std::string mode : {"constant", "reflect", "edge", "wrap"}) {
    auto out = run_op("Pad", {x, i64(pads), Tensor::scalar<int32_t>(9)}, {attr_string("mode", mode)}, 1, 19)[0];
    ASSERT_EQ(out.shape(), (Shape{8, 8})) << mode;
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 8; ++j) {
        int64_t si = ref_pad_src(i - 2, 3, mode), sj = ref_pad_src(j + 1, 4, mode);
        int32_t want = si < 0 || sj < 0 ? 9 : at<int32_t>(x, {si, sj});
        EXPECT_EQ(at<int32_t>(out, {i, j}), want) << mode << " " << i << "," << j;
      }
  }
  // Opset 2: pads and value as attributes; opset 18: axes input.
  auto out = run_op("Pad", {x}, {attr_ints("pads", {0, 1, 0, 0}), test::attr_float("value", 3.f)}, 1, 2)[0];
  ASSERT_EQ(out.shape(), (Shape{3, 5}));
  EXPECT_EQ(at<int32_t>(out, {1, 0}), 3);
  EXPECT_EQ(at<int32_t>(out, {1, 1}), at<int32_t>(x, {1, 0}));
  out = run_op("Pad", {x, i64({1, 2}), Tensor(), i64({-1})}, {attr_string("mode", "edge")}, 1, 18)[0];
  ASSERT_EQ(out.shape(), (Shape{3, 7}));
  EXPECT_EQ(at<int32_t>(out, {2, 0}), at<int32_t>(x, {2, 0}));
  EXPECT_EQ(at<int32_t>(out, {2, 6}), at<int32_t>(x, {2, 3}));
}

TEST(TensorOps, CenterCropPadCropsAndPadsAroundTheCentre) {
  Tensor x = rnd<float>(Shape{5, 4, 2});
  auto out = run_op("CenterCropPad", {x, i64({2, 7})}, {attr_ints("axes", {0, -2})})[0];
  ASSERT_EQ(out.shape(), (Shape{2, 7, 2}));
  // Crop 5 -> 2 starts at 1; pad 4 -> 7 puts 1 before.
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 7; ++j)
      for (int64_t k = 0; k < 2; ++k)
        EXPECT_EQ(at<float>(out, {i, j, k}), j >= 1 && j < 5 ? at<float>(x, {i + 1, j - 1, k}) : 0.f);
}

TEST(TensorOps, TriluUpperAndLowerWithK) {
  Tensor x = rnd<double>(Shape{2, 4, 5});
  for (int upper : {0, 1})
    for (int64_t k : {-2, 0, 3}) {
      auto out = run_op("Trilu", {x, Tensor::scalar<int64_t>(k)}, {attr_int("upper", upper)}, 1, 14)[0];
      for (int64_t i = 0; i < 40; ++i) {
        auto c = unravel(i, x.shape());
        bool keep = upper ? c[2] - c[1] >= k : c[2] - c[1] <= k;
        EXPECT_EQ(out.data<double>()[i], keep ? x.data<double>()[i] : 0.0);
      }
    }
}

TEST(TensorOps, DepthToSpaceBothModesAndSpaceToDepthInverse) {
  const int64_t b = 2;
  Tensor x = rnd<float>(Shape{2, 8, 3, 2});
  auto dcr = run_op("DepthToSpace", {x}, {attr_int("blocksize", b)})[0];
  auto crd = run_op("DepthToSpace", {x}, {attr_int("blocksize", b), attr_string("mode", "CRD")})[0];
  ASSERT_EQ(dcr.shape(), (Shape{2, 2, 6, 4}));
  for (int64_t i = 0; i < dcr.numel(); ++i) {
    auto c = unravel(i, dcr.shape());
    int64_t bh = c[2] % b, bw = c[3] % b, h = c[2] / b, w = c[3] / b;
    EXPECT_EQ(dcr.data<float>()[i], at<float>(x, {c[0], (bh * b + bw) * 2 + c[1], h, w}));
    EXPECT_EQ(crd.data<float>()[i], at<float>(x, {c[0], c[1] * b * b + bh * b + bw, h, w}));
  }
  auto back = run_op("SpaceToDepth", {dcr}, {attr_int("blocksize", b)})[0];
  ASSERT_EQ(back.shape(), x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(back.data<float>()[i], x.data<float>()[i]);
}

TEST(TensorOps, ReverseSequenceReversesEachBatchPrefix) {
  Tensor x = rnd<int64_t>(Shape{3, 4, 2}, -100, 100);  // batch_axis 0, time_axis 1
  Tensor lens = i64({4, 1, 2});
  auto out = run_op("ReverseSequence", {x, lens}, {attr_int("batch_axis", 0), attr_int("time_axis", 1)}, 1, 10)[0];
  for (int64_t bi = 0; bi < 3; ++bi)
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t k = 0; k < 2; ++k) {
        int64_t len = lens.data<int64_t>()[bi];
        int64_t src = t < len ? len - 1 - t : t;
        EXPECT_EQ(at<int64_t>(out, {bi, t, k}), at<int64_t>(x, {bi, src, k}));
      }
}

// ---- Gather family ----------------------------------------------------------

template <class I>
void check_gather() {
  Tensor data = rnd<float>(Shape{4, 5, 3});
  Tensor ind = rnd<I>(Shape{2, 3}, -5, 4);
  auto out = run_op("Gather", {data, ind}, {attr_int("axis", 1)}, 1, 13)[0];
  ASSERT_EQ(out.shape(), (Shape{4, 2, 3, 3}));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto c = unravel(i, out.shape());
    int64_t idx = static_cast<int64_t>(at<I>(ind, {c[1], c[2]}));
    if (idx < 0) idx += 5;
    EXPECT_EQ(out.data<float>()[i], at<float>(data, {c[0], idx, c[3]}));
  }
}

TEST(TensorOps, GatherWithInt32AndInt64Indices) {
  check_gather<int32_t>();
  check_gather<int64_t>();
}

TEST(TensorOps, GatherOutOfRangeNamesIndexAndAxisSize) {
  Tensor data = rnd<float>(Shape{4, 5});
  expect_error(
      [&] {
        run_op("Gather", {data, Tensor::from_vector<int32_t>({1, 5}, Shape{2})}, {attr_int("axis", 1)});
      },
      {"index 5", "axis 1", "size 5"});
  expect_error([&] { run_op("Gather", {data, i64({-5})}); }, {"index -5", "size 4"});
}

TEST(TensorOps, GatherElementsAndNDAgainstLoops) {
  Tensor data = rnd<float>(Shape{3, 4});
  Tensor ind = rnd<int64_t>(Shape{2, 4}, -4, 3);
  auto out = run_op("GatherElements", {data, ind}, {attr_int("axis", 1)}, 1, 13)[0];
  ASSERT_EQ(out.shape(), (Shape{2, 4}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      int64_t k = at<int64_t>(ind, {i, j});
      EXPECT_EQ(at<float>(out, {i, j}), at<float>(data, {i, k < 0 ? k + 4 : k}));
    }
  expect_error(
      [&] {
        run_op("GatherElements", {data, i64({4}).view(Shape{1, 1})}, {attr_int("axis", 1)});
      },
      {"index 4", "size 4"});

  // GatherND with batch_dims 1: data [2,3,4], indices [2,5,1] pick rows per batch.
  Tensor d3 = rnd<int64_t>(Shape{2, 3, 4}, -100, 100);
  Tensor nd = rnd<int64_t>(Shape{2, 5, 1}, -3, 2);
  out = run_op("GatherND", {d3, nd}, {attr_int("batch_dims", 1)}, 1, 13)[0];
  ASSERT_EQ(out.shape(), (Shape{2, 5, 4}));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto c = unravel(i, out.shape());
    int64_t r = at<int64_t>(nd, {c[0], c[1], 0});
    EXPECT_EQ(out.data<int64_t>()[i], at<int64_t>(d3, {c[0], r < 0 ? r + 3 : r, c[2]}));
  }
  expect_error([&] { run_op("GatherND", {d3, i64({0, 3}).view(Shape{1, 2})}, {}, 1, 13); }, {"index 3", "size 3"});
}

TEST(TensorOps, ScatterElementsAllReductions) {
  for (std::string red : {"none", "add", "mul", "max", "min"}) {
    Tensor data = rnd<float>(Shape{3, 4});
    Tensor ind = rnd<int64_t>(Shape{3, 2}, -4, 3);  // duplicates likely
    Tensor upd = rnd<float>(Shape{3, 2});
    auto out =
        run_op("ScatterElements", {data, ind, upd}, {attr_int("axis", 1), attr_string("reduction", red)}, 1, 18)[0];
    Tensor want = data.clone();
    float* w = want.data<float>();
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        int64_t k = at<int64_t>(ind, {i, j});
        float& t = w[i * 4 + (k < 0 ? k + 4 : k)];
        float u = at<float>(upd, {i, j});
        t = red == "none"  ? u
            : red == "add" ? t + u
            : red == "mul" ? t * u
            : red == "max" ? std::max(t, u)
                           : std::min(t, u);
      }
    for (int64_t i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(out.data<float>()[i], w[i]) << red;
  }
  // Scatter (opset 9) is the same op; bad indices throw.
  Tensor data = rnd<float>(Shape{2, 2});
  auto out = run_op("Scatter", {data, i64({1}).view(Shape{1, 1}), Tensor::from_vector<float>({7.f}, Shape{1, 1})}, {},
                    1, 9)[0];
  EXPECT_EQ(at<float>(out, {1, 0}), 7.f);
  expect_error(
      [&] {
        run_op("ScatterElements", {data, i64({2}).view(Shape{1, 1}), Tensor::from_vector<float>({7.f}, Shape{1, 1})});
      },
      {"index 2", "size 2"});
}

TEST(TensorOps, ScatterNDAddWithDuplicates) {
  Tensor data = rnd<int64_t>(Shape{4, 3}, -100, 100);
  Tensor ind = Tensor::from_vector<int64_t>({1, -1, 1}, Shape{3, 1});
  Tensor upd = rnd<int64_t>(Shape{3, 3}, -100, 100);
  auto out = run_op("ScatterND", {data, ind, upd}, {attr_string("reduction", "add")}, 1, 18)[0];
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j) {
      int64_t want = at<int64_t>(data, {i, j});
      if (i == 1) want += at<int64_t>(upd, {0, j}) + at<int64_t>(upd, {2, j});
      if (i == 3) want += at<int64_t>(upd, {1, j});
      EXPECT_EQ(at<int64_t>(out, {i, j}), want);
    }
  expect_error(
      [&] {
        run_op("ScatterND", {data, Tensor::from_vector<int64_t>({4}, Shape{1, 1}), rnd<int64_t>(Shape{1, 3})});
      },
      {"index 4", "size 4"});
}

TEST(TensorOps, CompressAndNonZero) {
  Tensor x = rnd<int32_t>(Shape{3, 4}, -1, 1);  // about a third zeros
  Tensor cond = Tensor::from_vector<bool>({true, false, true}, Shape{3});
  auto out = run_op("Compress", {x, cond}, {attr_int("axis", 1)}, 1, 11)[0];
  ASSERT_EQ(out.shape(), (Shape{3, 2}));
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(at<int32_t>(out, {i, 0}), at<int32_t>(x, {i, 0}));
    EXPECT_EQ(at<int32_t>(out, {i, 1}), at<int32_t>(x, {i, 2}));
  }
  out = run_op("Compress", {x, cond}, {}, 1, 11)[0];
  ASSERT_EQ(out.shape(), (Shape{2}));
  EXPECT_EQ(out.data<int32_t>()[1], x.data<int32_t>()[2]);

  auto nz = run_op("NonZero", {x}, {}, 1, 13)[0];
  std::vector<std::pair<int64_t, int64_t>> want;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      if (at<int32_t>(x, {i, j}) != 0) want.emplace_back(i, j);
  const int64_t n = static_cast<int64_t>(want.size());
  ASSERT_EQ(nz.shape(), (Shape{2, n}));
  for (int64_t k = 0; k < n; ++k) {
    EXPECT_EQ(nz.data<int64_t>()[k], want[k].first);
    EXPECT_EQ(nz.data<int64_t>()[n + k], want[k].second);
  }
}

// ---- TopK, Unique -----------------------------------------------------------

TEST(TensorOps, TopKLargestSmallestWithTiesLowerIndexFirst) {
  Tensor x = rnd<int32_t>(Shape{3, 6}, 0, 3);  // many ties
  for (int largest : {0, 1}) {
    auto outs = run_op("TopK", {x, i64({4})}, {attr_int("largest", largest)}, 2, 11);
    ASSERT_EQ(outs[0].shape(), (Shape{3, 4}));
    for (int64_t i = 0; i < 3; ++i) {
      std::vector<int64_t> order(6);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        int32_t va = at<int32_t>(x, {i, a}), vb = at<int32_t>(x, {i, b});
        return largest ? va > vb : va < vb;
      });
      for (int64_t j = 0; j < 4; ++j) {
        EXPECT_EQ(at<int64_t>(outs[1], {i, j}), order[j]);
        EXPECT_EQ(at<int32_t>(outs[0], {i, j}), at<int32_t>(x, {i, order[j]}));
      }
    }
  }
  expect_error([&] { run_op("TopK", {x, i64({7})}, {}, 2, 11); }, {"k = 7"});
}

TEST(TensorOps, UniqueSortedAndUnsortedWithAllOutputs) {
  Tensor x = rnd<int64_t>(Shape{10}, -3, 3);
  for (int sorted : {0, 1}) {
    auto outs = run_op("Unique", {x}, {attr_int("sorted", sorted)}, 4, 11);
    std::vector<int64_t> vals, first, counts;
    std::map<int64_t, size_t> pos;
    for (int64_t i = 0; i < 10; ++i) {
      int64_t v = x.data<int64_t>()[i];
      if (!pos.count(v)) {
        pos[v] = vals.size();
        vals.push_back(v);
        first.push_back(i);
        counts.push_back(0);
      }
      ++counts[pos[v]];
    }
    if (sorted) {  // reorder by value
      std::vector<size_t> o(vals.size());
      std::iota(o.begin(), o.end(), 0);
      std::sort(o.begin(), o.end(), [&](size_t a, size_t b) { return vals[a] < vals[b]; });
      std::vector<int64_t> v2, f2, c2;
      for (size_t k : o) v2.push_back(vals[k]), f2.push_back(first[k]), c2.push_back(counts[k]);
      vals = v2, first = f2, counts = c2;
      for (size_t k = 0; k < vals.size(); ++k) pos[vals[k]] = k;
    }
    EXPECT_EQ(outs[0].to_int64_vector(), vals);
    EXPECT_EQ(outs[1].to_int64_vector(), first);
    EXPECT_EQ(outs[3].to_int64_vector(), counts);
    for (int64_t i = 0; i < 10; ++i)
      EXPECT_EQ(outs[2].data<int64_t>()[i], static_cast<int64_t>(pos[x.data<int64_t>()[i]]));
  }
  // Along an axis: rows compared whole.
  Tensor rows = Tensor::from_vector<float>({2, 1, 0, 5, 2, 1, 0, 4}, Shape{4, 2});
  auto outs = run_op("Unique", {rows}, {attr_int("axis", 0)}, 4, 11);
  ASSERT_EQ(outs[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(std::vector<float>(outs[0].span<float>().begin(), outs[0].span<float>().end()),
            (std::vector<float>{0, 4, 0, 5, 2, 1}));
  EXPECT_EQ(outs[1].to_int64_vector(), (std::vector<int64_t>{3, 1, 0}));
  EXPECT_EQ(outs[2].to_int64_vector(), (std::vector<int64_t>{2, 1, 2, 0}));
  EXPECT_EQ(outs[3].to_int64_vector(), (std::vector<int64_t>{1, 1, 2}));
}

// ---- planning: inference without input values -------------------------------

// Runs only `op`'s inference with input types known but no values; returns output 0's type.
ValueType infer_without_values(const std::string& op, std::vector<ValueType> types, std::vector<Attribute> attrs,
                               size_t num_outputs = 1, int opset = 18) {
  Node n;
  n.name = "planned";
  n.op_type = op;
  n.opset = opset;
  n.attributes = std::move(attrs);
  for (size_t i = 0; i < types.size(); ++i) n.inputs.push_back(types[i].dtype == DType::kUndefined ? -1 : int(i));
  for (size_t o = 0; o < num_outputs; ++o) n.outputs.push_back(static_cast<int>(types.size() + o));
  const OpDef* def = OpRegistry::global().find("", op, opset);
  EXPECT_TRUE(def) << op;
  InferContext ctx(n, types, std::vector<const Tensor*>(types.size(), nullptr));
  def->infer(ctx);
  return ctx.outputs()[0];
}

TEST(TensorOps, InferenceWithoutValuesLeavesShapesUnknown) {
  const ValueType f{DType::kFloat32, Shape{2, 3, 4}};
  const ValueType ids{DType::kInt64, Shape{2}};
  EXPECT_FALSE(infer_without_values("Reshape", {f, ids}, {}).shape.rank_known);
  EXPECT_EQ(infer_without_values("Slice", {f, ids, ids}, {}).shape.dims.size(), 3u);
  EXPECT_FALSE(infer_without_values("Slice", {f, ids, ids}, {}).shape.fully_known());
  EXPECT_FALSE(infer_without_values("Expand", {f, ids}, {}).shape.rank_known);
  EXPECT_FALSE(infer_without_values("Tile", {f, ValueType{DType::kInt64, Shape{3}}}, {}).shape.fully_known());
  EXPECT_FALSE(infer_without_values("Pad", {f, ValueType{DType::kInt64, Shape{6}}}, {}).shape.fully_known());
  EXPECT_FALSE(infer_without_values("Squeeze", {f, ids}, {}, 1, 13).shape.rank_known);
  EXPECT_FALSE(infer_without_values("Unsqueeze", {f, ids}, {}, 1, 13).shape.rank_known);
  EXPECT_FALSE(infer_without_values("ConstantOfShape", {ids}, {}).shape.fully_known());
  EXPECT_EQ(infer_without_values("ConstantOfShape", {ids}, {}).shape.dims.size(), 2u);
  const ValueType scalar{DType::kInt32, Shape{}};
  EXPECT_FALSE(infer_without_values("Range", {scalar, scalar, scalar}, {}).shape.fully_known());
  EXPECT_FALSE(infer_without_values("Split", {f, ids}, {attr_int("axis", 1)}, 2).shape.fully_known());
  EXPECT_FALSE(infer_without_values("TopK", {f, ValueType{DType::kInt64, Shape{1}}}, {}, 2).shape.fully_known());
  EXPECT_FALSE(infer_without_values("Compress", {f, ValueType{DType::kBool, Shape{3}}}, {}).shape.fully_known());
  EXPECT_FALSE(infer_without_values("NonZero", {f}, {}).shape.fully_known());
  EXPECT_FALSE(
      infer_without_values("OneHot", {ids, scalar, ValueType{DType::kFloat32, Shape{2}}}, {}).shape.fully_known());
  EXPECT_FALSE(infer_without_values("CenterCropPad", {f, ValueType{DType::kInt64, Shape{3}}}, {}).shape.fully_known());
  // Unknown input shapes propagate without errors.
  const ValueType unknown{DType::kFloat32, PartialShape()};
  EXPECT_FALSE(infer_without_values("Transpose", {unknown}, {}).shape.rank_known);
  EXPECT_FALSE(infer_without_values("Concat", {unknown, f}, {attr_int("axis", 0)}).shape.fully_known());
  EXPECT_EQ(infer_without_values("Shape", {unknown}, {}).shape.dims.size(), 1u);
  EXPECT_FALSE(infer_without_values("Gather", {unknown, ids}, {}).shape.rank_known);
}

}  // namespace
}  // namespace onyx
