#include <gtest/gtest.h>

#include "onyx/error.h"
#include "onyx/governor.h"

namespace onyx {

TEST(Governor, LeasesEndWithTheirOwner) {
  auto g = MemoryGovernor::create("cuda:0", 1000);
  {
    auto weights = g->lease("weights", 600);
    auto arenas = g->lease("plan arenas", 300);
    EXPECT_EQ(g->leased(), 900u);
    EXPECT_EQ(g->lease_count(), 2u);
    arenas->resize(100);
    EXPECT_EQ(g->leased(), 700u);
  }
  EXPECT_EQ(g->leased(), 0u);
  EXPECT_EQ(g->lease_count(), 0u);
}

TEST(Governor, RefusalListsEveryHolderAndLeavesStateUnchanged) {
  auto g = MemoryGovernor::create("cuda:0", 1 << 20);
  auto weights = g->lease("weights", 700 << 10);
  auto staging = g->lease("staging", 100 << 10);
  try {
    g->lease("plan arenas", 300 << 10);
    FAIL() << "no refusal";
  } catch (const Error& e) {
    std::string m = e.what();
    for (const char* want : {"plan arenas", "weights", "700.00 KiB", "staging", "100.00 KiB", "cuda:0"})
      EXPECT_NE(m.find(want), std::string::npos) << want << " missing from: " << m;
  }
  EXPECT_EQ(g->leased(), 800u << 10);
  EXPECT_THROW(staging->resize(400 << 10), Error);
  EXPECT_EQ(staging->bytes(), 100u << 10);
  // Once the budget allows, the same lease goes through.
  g->set_budget(2 << 20);
  auto arenas = g->lease("plan arenas", 300 << 10);
  EXPECT_EQ(g->leased(), 1100u << 10);
}

}  // namespace onyx
