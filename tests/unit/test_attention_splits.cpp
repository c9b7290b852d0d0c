// The decode attention kernel's choice of form and key splits (backends/cuda/kernels/
// attention_splits.h): host arithmetic, tested here so that builds without CUDA check it too.
#include <gtest/gtest.h>

#include "backends/cuda/kernels/attention_splits.h"

namespace onyx::cuda {
namespace {

constexpr int64_t kH200Sms = 132;

// The 1.24B Llama on an H200: 8 KV heads of 64 a batch row, a cache of 576 positions (a prompt
// of 511 and 64 new tokens): the configurations measured in the generation loop.
TEST(AttentionSplits, TheMeasuredLlamaShapesTakeTheMeasuredForms) {
  EXPECT_EQ(decode_short_form_splits(576, 8, kH200Sms, 64), 9);   // batch 1: one step of 64 keys a warp
  EXPECT_EQ(decode_short_form_splits(576, 16, kH200Sms, 64), 8);  // batch 2: 144 blocks would not fit; 8 splits
  EXPECT_EQ(decode_short_form_splits(576, 32, kH200Sms, 64), 0);  // batch 4: the long form
  EXPECT_EQ(decode_short_form_splits(576, 64, kH200Sms, 64), 0);  // batch 8: the long form
  EXPECT_EQ(decode_short_form_splits(8192, 8, kH200Sms, 64), 0);  // a long past: the long form
}

// Whatever the shape, a split count it gives keeps every warp to at most two of the short form's
// steps, a cluster the hardware launches (more than 8 blocks only at one step a warp), and a grid
// of at most one block an SM (but 2 splits, as the long form's rule allows).
TEST(AttentionSplits, EverySplitCountItGivesKeepsItsBounds) {
  int shorts = 0, one_step = 0;
  for (int64_t d : {64, 128})
    for (int64_t sms : {16, 78, 132})
      for (int64_t heads : {1, 2, 3, 8, 16, 24, 64, 200})
        for (int64_t S = 1; S <= 3000; S += 7) {
          const int64_t splits = decode_short_form_splits(S, heads, sms, d);
          if (splits == 0) continue;
          ++shorts;
          const int64_t step = decode_step_keys(d, 2), chunk = (S + splits - 1) / splits;
          SCOPED_TRACE(testing::Message() << "S " << S << " heads " << heads << " SMs " << sms << " d " << d);
          EXPECT_GE(splits, 1);
          EXPECT_LE(splits, kMaxClusterBlocks);
          EXPECT_LE(chunk, 2 * step);
          EXPECT_LE(heads * splits, std::max<int64_t>(sms, 2 * heads));
          if (splits > 8) EXPECT_LE(chunk, step);
          one_step += chunk <= step;
        }
  // The rule takes the short form often, in both branches, for these bounds to mean something.
  EXPECT_GT(shorts, 1000);
  EXPECT_GT(one_step, 100);
  EXPECT_GT(shorts - one_step, 100);
}

TEST(AttentionSplits, ShapesItDoesNotKnowTakeTheLongForm) {
  EXPECT_EQ(decode_short_form_splits(0, 8, kH200Sms, 64), 0);
  EXPECT_EQ(decode_short_form_splits(512, 0, kH200Sms, 64), 0);
  EXPECT_EQ(decode_short_form_splits(512, 8, 0, 64), 0);
  EXPECT_EQ(decode_short_form_splits(512, 8, kH200Sms, 96), 0);
}

}  // namespace
}  // namespace onyx::cuda
