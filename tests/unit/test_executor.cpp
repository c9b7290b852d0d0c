#include <gtest/gtest.h>

#include "op_test_util.h"

namespace onyx {

TEST(Executor, AddBroadcastsAgainstReference) {
  Tensor a = test::random_tensor<float>(Shape{3, 1, 5});
  Tensor b = test::random_tensor<float>(Shape{4, 1});
  auto out = test::run_op("Add", {a, b});
  ASSERT_EQ(out[0].shape(), (Shape{3, 4, 5}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 5; ++k)
        EXPECT_EQ(out[0].data<float>()[(i * 4 + j) * 5 + k], a.data<float>()[i * 5 + k] + b.data<float>()[j]);
}

TEST(Executor, UnknownOpNamesNodeOpDomainAndOpset) {
  try {
    test::run_op("FrobnicateXYZ", {test::random_tensor<float>(Shape{2})}, {}, 1, 17, "com.example");
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("node_under_test"), std::string::npos) << m;
    EXPECT_NE(m.find("FrobnicateXYZ"), std::string::npos) << m;
    EXPECT_NE(m.find("com.example"), std::string::npos) << m;
    EXPECT_NE(m.find("opset 17"), std::string::npos) << m;
  }
}

TEST(Executor, KernelErrorsCarryTheNode) {
  try {
    test::run_op("Add", {test::random_tensor<float>(Shape{2, 3}), test::random_tensor<float>(Shape{4})});
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("node 'node_under_test' (Add)"), std::string::npos) << m;
    EXPECT_NE(m.find("do not broadcast"), std::string::npos) << m;
  }
}

}  // namespace onyx
