// What a planned run allocates once its plan is cached: nothing per step. The global
// operator new of this test program counts the allocations made while `counting` is on.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "onyx/tensor.h"

namespace {

std::atomic<bool> counting{false};
std::atomic<long> news{0};

}  // namespace

void* operator new(size_t bytes) {
  if (counting.load(std::memory_order_relaxed)) news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(bytes ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }

namespace onyx {
namespace {

TEST(RunAllocations, DimsKeepSmallShapesInPlace) {
  Shape s{1, 2, 3, 4};
  news = 0;
  counting = true;
  Shape copy = s;
  copy[0] = 7;
  Tensor t = Tensor::borrow(DType::kFloat32, s, nullptr);
  Tensor u = t;
  counting = false;
  EXPECT_EQ(news.load(), 1);  // the borrowed tensor's storage record; no shape allocates
  EXPECT_EQ(s, (Shape{1, 2, 3, 4}));
  EXPECT_EQ(copy, (Shape{7, 2, 3, 4}));
  Dims big{1, 2, 3, 4, 5, 6, 7, 8, 9};  // past the inline dims: on the heap, the same to its users
  big.push_back(10);
  big.insert(big.begin(), 0);
  big.erase(big.begin() + 1);
  EXPECT_EQ(big, (std::vector<int64_t>{0, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  Dims moved = std::move(big);
  EXPECT_EQ(moved.size(), 10u);
  EXPECT_EQ(Shape(moved).numel(), 0);
  EXPECT_EQ(Shape(moved).str(), "[0,2,3,4,5,6,7,8,9,10]");
}

}  // namespace
}  // namespace onyx
