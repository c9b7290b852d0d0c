#include <gtest/gtest.h>

#include <random>

#include "plan/placement.h"

namespace onyx {

TEST(Placement, PisarchykLeeExampleReachesTheLowerBound) {
  // (first, last, size) from Pisarchyk & Lee (2020): the optimum is 124.
  std::vector<BufferLife> b = {{0, 1, 32}, {1, 4, 28}, {2, 5, 36}, {3, 5, 16},
                               {4, 5, 8},  {5, 7, 64}, {6, 8, 10}, {7, 8, 40}};
  EXPECT_EQ(lower_bound_bytes(b), 124u);
  Placement p = place_greedy_by_size(b);
  EXPECT_EQ(p.arena_bytes, 124u);
  EXPECT_EQ(verify_placement(b, p), "");
  EXPECT_EQ(place_best(b).arena_bytes, 124u);
}

TEST(Placement, RandomLifetimesNeverShareBytesWhileLive) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 200; ++trial) {
    int steps = 5 + rng() % 60;
    std::vector<BufferLife> b(1 + rng() % 80);
    for (auto& x : b) {
      x.first = rng() % steps;
      x.last = x.first + rng() % 10;
      x.bytes = 256 * (1 + rng() % 64);
    }
    for (const Placement& p : {place_greedy_by_size(b), place_greedy_by_first_use(b), place_best(b)}) {
      ASSERT_EQ(verify_placement(b, p), "") << p.algorithm << " trial " << trial;
      ASSERT_GE(p.arena_bytes, lower_bound_bytes(b));
    }
  }
}

TEST(Placement, VerifierCatchesAnOverlap) {
  std::vector<BufferLife> b = {{0, 3, 100}, {2, 5, 100}};
  Placement bad{{0, 50}, 150, "bad"};
  EXPECT_NE(verify_placement(b, bad), "");
}

}  // namespace onyx
