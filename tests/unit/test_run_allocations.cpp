// What a planned run allocates once its plan is cached: nothing per step. The global
// operator new of this test program counts the allocations made while `counting` is on.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "exec/executor.h"
#include "graph_builder.h"

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

// Two ops whose kernels allocate nothing: a doubling, and a view.
const OpRegistry& test_ops() {
  static const OpRegistry* r = [] {
    auto* reg = new OpRegistry();
    auto same = [](InferContext& ctx) { ctx.set_output(0, ctx.input_dtype(0), ctx.input_shape(0)); };
    reg->add(onnx_op("Double", 1, same, [](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      float* y = ctx.output(0).data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) y[i] = 2 * x.data<float>()[i];
    }));
    reg->add(onnx_op("Same", 1, same).view(0, 0));
    return reg;
  }();
  return *r;
}

// x -> (Double, Same) x steps -> y
Graph chain(int steps) {
  test::GraphBuilder b;
  int v = b.input("x");
  for (int s = 0; s < steps; ++s) v = b.node(s % 2 ? "Same" : "Double", {v});
  b.g.outputs.push_back(v);
  return std::move(b.g);
}

struct Counts {
  long news = 0, tensors = 0;  // operator new; tensor bytes from the session's allocator
};

// The allocations of one run of a graph of `steps` steps, after two runs that plan and warm up.
Counts steady_run(int steps, Tensor& x, Tensor& y) {
  Graph g = chain(steps);
  SessionOptions o;
  o.intra_op_threads = 1;
  auto host = make_cpu_allocator();
  GraphExecutor exec(g, test_ops(), host, o);
  const std::vector<Tensor> in{x};
  for (int warm = 0; warm < 2; ++warm) exec.run(in);
  const uint64_t before = host->stats().allocations;
  news = 0;
  counting = true;
  std::vector<Tensor> out = exec.run(in);
  counting = false;
  Counts c{news.load(), static_cast<long>(host->stats().allocations - before)};
  y = out[0];
  return c;
}

TEST(RunAllocations, APlannedRunAllocatesNothingPerStep) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor y;
  const Counts few = steady_run(4, x, y), many = steady_run(16, x, y);
  EXPECT_EQ(few.news, many.news) << "a step of a planned run allocates";
  EXPECT_EQ(few.tensors, many.tensors);
  // The output handed to the caller (its bytes and its storage record) and the list of outputs.
  EXPECT_EQ(many.tensors, 1);
  EXPECT_LE(many.news, 2);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.data<float>()[5], 6 * 256);  // doubled 8 times
}

TEST(RunAllocations, AFinishedRunHoldsNothingOfItsInputsOrOutputs) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Graph g = chain(3);
  SessionOptions o;
  o.intra_op_threads = 1;
  GraphExecutor exec(g, test_ops(), make_cpu_allocator(), o);
  for (int run = 0; run < 3; ++run) {
    std::vector<Tensor> out = exec.run({x});
    EXPECT_EQ(x.storage().use_count(), 1) << "run " << run << " keeps its input";
    EXPECT_EQ(out[0].storage().use_count(), 1) << "run " << run << " keeps its output";
  }
}

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
