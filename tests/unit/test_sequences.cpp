// Sequence, optional and map values (tensors of element tensors) and the sequence ops, on random tensors:
// what goes in comes out, splits and concatenations invert each other, positions count from
// either end, and bad positions are errors that say which.
#include <gtest/gtest.h>

#include "op_test_util.h"

namespace onyx {

namespace {

using test::attr_int;
using test::attr_ints;

void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.dtype(), b.dtype());
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.get_as_double(i), b.get_as_double(i)) << "element " << i;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Sequences, ConstructInsertAtEraseLength) {
  Tensor a = test::random_tensor<float>(Shape{2, 3}), b = test::random_tensor<float>(Shape{4});
  Tensor c = test::random_tensor<float>(Shape{1});
  Tensor seq = test::run_op("SequenceConstruct", {a, b}, {}, 1, 11)[0];
  ASSERT_EQ(seq.dtype(), DType::kSequence);
  ASSERT_EQ(seq.numel(), 2);
  EXPECT_EQ(seq.element_dtype(), DType::kFloat32);
  expect_same(seq.elements()[0], a);
  expect_same(seq.elements()[1], b);
  EXPECT_FALSE(seq.elements()[0].shares_storage_with(a));  // copied in: the feed may be reused
  // Insert at -1: before the last element.
  Tensor ins = test::run_op("SequenceInsert", {seq, c, Tensor::scalar<int64_t>(-1)}, {}, 1, 11)[0];
  ASSERT_EQ(ins.numel(), 3);
  expect_same(ins.elements()[1], c);
  expect_same(ins.elements()[2], b);
  EXPECT_EQ(seq.numel(), 2);  // the input sequence is unchanged
  expect_same(test::run_op("SequenceAt", {ins, Tensor::scalar<int32_t>(-3)}, {}, 1, 11)[0], a);
  Tensor erased = test::run_op("SequenceErase", {ins, Tensor::scalar<int64_t>(0)}, {}, 1, 11)[0];
  ASSERT_EQ(erased.numel(), 2);
  expect_same(erased.elements()[0], c);
  EXPECT_EQ(test::run_op("SequenceLength", {erased}, {}, 1, 11)[0].data<int64_t>()[0], 2);
}

TEST(Sequences, BadPositionsAndTypesAreNamed) {
  Tensor seq = Tensor::sequence({test::random_tensor<float>(Shape{2})});
  EXPECT_NE(error_of([&] { test::run_op("SequenceAt", {seq, Tensor::scalar<int64_t>(1)}, {}, 1, 11); })
                .find("position 1 is out of range for a sequence of 1 elements"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              test::run_op("SequenceInsert", {seq, test::random_tensor<int32_t>(Shape{2})}, {}, 1, 11);
            }).find("the sequence holds float32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { test::run_op("SequenceErase", {Tensor::sequence({}, DType::kFloat32)}, {}, 1, 11); })
                .find("empty sequence"),
            std::string::npos);
}

TEST(Sequences, SplitThenConcatGivesTheTensorBack) {
  Tensor x = test::random_tensor<float>(Shape{3, 7, 2});
  // Uneven sizes along axis 1, then back.
  Tensor parts = test::run_op("SplitToSequence", {x, Tensor::from_vector<int64_t>({2, 4, 1}, Shape{3})},
                              {attr_int("axis", 1)}, 1, 11)[0];
  ASSERT_EQ(parts.numel(), 3);
  EXPECT_EQ(parts.elements()[1].shape(), Shape({3, 4, 2}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 2; ++k)
        EXPECT_EQ(parts.elements()[1].get_as_double((i * 4 + j) * 2 + k), x.get_as_double((i * 7 + 2 + j) * 2 + k));
  expect_same(test::run_op("ConcatFromSequence", {parts}, {attr_int("axis", 1)}, 1, 11)[0], x);
  // A scalar split: chunks of 3 along axis 1, the last of 1.
  Tensor chunks = test::run_op("SplitToSequence", {x, Tensor::scalar<int64_t>(3)}, {attr_int("axis", 1)}, 1, 11)[0];
  ASSERT_EQ(chunks.numel(), 3);
  EXPECT_EQ(chunks.elements()[2].shape(), Shape({3, 1, 2}));
  // No split, keepdims 0: one slice per index with the axis removed; new_axis stacks them back.
  Tensor slices = test::run_op("SplitToSequence", {x}, {attr_int("axis", 2), attr_int("keepdims", 0)}, 1, 11)[0];
  ASSERT_EQ(slices.numel(), 2);
  EXPECT_EQ(slices.elements()[0].shape(), Shape({3, 7}));
  expect_same(test::run_op("ConcatFromSequence", {slices}, {attr_int("axis", -1), attr_int("new_axis", 1)}, 1, 11)[0], x);
  EXPECT_NE(error_of([&] {
              test::run_op("SplitToSequence", {x, Tensor::from_vector<int64_t>({2, 2}, Shape{2})},
                           {attr_int("axis", 1)}, 1, 11);
            }).find("split sizes add up to 4"),
            std::string::npos);
}

TEST(Sequences, OptionalsHoldOneValueOrNone) {
  Tensor a = test::random_tensor<float>(Shape{3});
  Tensor some = test::run_op("Optional", {a}, {}, 1, 15)[0];
  ASSERT_EQ(some.dtype(), DType::kOptional);
  EXPECT_TRUE(test::run_op("OptionalHasElement", {some}, {}, 1, 18)[0].data<bool>()[0]);
  expect_same(test::run_op("OptionalGetElement", {some}, {}, 1, 18)[0], a);
  Tensor none = Tensor::optional(Tensor(), DType::kFloat32);
  EXPECT_FALSE(test::run_op("OptionalHasElement", {none}, {}, 1, 18)[0].data<bool>()[0]);
  EXPECT_NE(error_of([&] { test::run_op("OptionalGetElement", {none}, {}, 1, 18); }).find("holds no value"),
            std::string::npos);
  // A plain tensor is a value that is present.
  EXPECT_TRUE(test::run_op("OptionalHasElement", {a}, {}, 1, 18)[0].data<bool>()[0]);
}

TEST(Sequences, SequencesCloneAndShareTheirElements) {
  Tensor seq = Tensor::sequence({test::random_tensor<int64_t>(Shape{2}), test::random_tensor<int64_t>(Shape{5})});
  Tensor copy = seq.clone();
  ASSERT_EQ(copy.numel(), 2);
  EXPECT_EQ(copy.element_dtype(), DType::kInt64);
  EXPECT_TRUE(copy.elements()[1].shares_storage_with(seq.elements()[1]));
  EXPECT_EQ(seq.type_str(), "sequence<int64>[2]");
}

TEST(Sequences, MapsHoldKeysAndValuesOfOneLength) {
  Tensor keys = Tensor::from_vector<int64_t>({4, 1, 9}, Shape{3});
  Tensor values = test::random_tensor<float>(Shape{3});
  Tensor m = Tensor::map(keys, values);
  EXPECT_EQ(m.dtype(), DType::kMap);
  EXPECT_EQ(m.element_dtype(), DType::kFloat32);
  expect_same(m.elements()[0], keys);
  expect_same(m.elements()[1], values);
  EXPECT_EQ(m.type_str(), "map<int64,float32>");
  EXPECT_NE(error_of([&] { Tensor::map(keys, test::random_tensor<float>(Shape{2})); }).find("one length"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Tensor::map(values, values); }).find("int64 or strings"), std::string::npos);
}

}  // namespace

}  // namespace onyx
