// The prompt graph's LM head on the last position only (genai/language_model_parts.h,
// slice_prompt_logits): the rewritten decoder draws the token the whole one draws, from the same
// logits, with the product reading one position; what it does not match it leaves alone; the
// tiny Llama fixture's LM head, as the CPU runs it, is matched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "exec/executor.h"
#include "genai/language_model_parts.h"
#include "graph_builder.h"
#include "model/loader.h"
#include "op_test_util.h"
#include "ops/sampling.h"
#include "passes/optimize.h"

namespace onyx::genai {
namespace {

using Builder = test::GraphBuilder;

// x [B, S, 16] -> h = Tanh(x) -> logits = MatMul(h, W [16, 40]) -> Sample.
Graph decoder() {
  Builder b;
  const int x = b.input("x");
  const int h = b.node("Tanh", {x});
  const int w = b.init("w", test::random_tensor<float>(Shape{16, 40}, -1, 1));
  Node mm;
  mm.name = "lm_head";
  mm.op_type = "MatMul";
  mm.opset = 13;
  mm.inputs = {h, w};
  const int logits = b.g.value_id("logits");
  mm.outputs = {logits};
  b.g.values[logits].producer = static_cast<int>(b.g.nodes.size());
  b.g.nodes.push_back(mm);
  b.g.values[x].declared.dtype = DType::kFloat32;
  b.g.outputs = {logits};
  append_sampler(b.g, "logits");
  return b.g;
}

Tensor zeros(Shape s) {
  Tensor t(DType::kInt64, s);
  std::fill(t.data<int64_t>(), t.data<int64_t>() + t.numel(), int64_t{0});
  return t;
}

// Runs the decoder greedily over x, each row read at position S - 1: (tokens, logits read).
std::pair<std::vector<int64_t>, Tensor> draw(Graph& g, const Tensor& x) {
  const int64_t B = x.shape()[0], S = x.shape()[1];
  Tensor options(DType::kFloat32, Shape{B, sampling::kOptionCount});
  for (int64_t b = 0; b < B; ++b) {
    float* o = options.data<float>() + b * sampling::kOptionCount;
    std::fill(o, o + sampling::kOptionCount, 0.f);
    o[sampling::kTopP] = 1.f;
    o[sampling::kRepetitionPenalty] = 1.f;
  }
  Tensor rng = zeros(Shape{B, 2});
  Tensor history = zeros(Shape{B, 0});
  Tensor position(DType::kInt64, Shape{B});
  for (int64_t b = 0; b < B; ++b) position.data<int64_t>()[b] = S - 1;
  Tensor start = zeros(Shape{B});
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator(), SessionOptions{});
  std::vector<Tensor> out = exec.run({x, options, rng, history, position, start});
  return {std::vector<int64_t>(out[0].data<int64_t>(), out[0].data<int64_t>() + B), out[1]};
}

int count(const Graph& g, const std::string& op) {
  int c = 0;
  for (const Node& n : g.nodes) c += n.op_type == op;
  return c;
}

}  // namespace

TEST(PromptLogits, TheLastPositionAloneGivesTheSameTokensAndLogits) {
  Graph whole = decoder();
  Graph sliced = whole;
  ASSERT_TRUE(slice_prompt_logits(sliced, "logits"));
  EXPECT_EQ(count(sliced, "Slice"), 1);
  // The product reads the slice; Sample no longer reads a position.
  for (const Node& n : sliced.nodes) {
    if (n.op_type == "MatMul") EXPECT_EQ(sliced.nodes[sliced.values[n.inputs[0]].producer].op_type, "Slice");
    if (n.op_type == "Sample") EXPECT_LT(n.inputs[4], 0);
  }
  for (int rep = 0; rep < 4; ++rep) {
    const Tensor x = test::random_tensor<float>(Shape{3, 2 + rep * 3, 16}, -2, 2);
    const auto [want, want_logits] = draw(whole, x);
    const auto [got, got_logits] = draw(sliced, x);
    EXPECT_EQ(got, want) << "prompt length " << x.shape()[1];
    ASSERT_TRUE(got_logits.shape() == want_logits.shape());
    for (int64_t i = 0; i < want_logits.numel(); ++i)
      EXPECT_NEAR(got_logits.data<float>()[i], want_logits.data<float>()[i],
                  1e-5 * (1 + std::abs(want_logits.data<float>()[i])));
  }
}

TEST(PromptLogits, WhatItDoesNotMatchStaysAsItIs) {
  // The logits made by an Add after the product (not a product that reads rows): unchanged.
  Builder b;
  const int x = b.input("x");
  const int mm = b.node("MatMul", {x, b.init("w", test::random_tensor<float>(Shape{16, 40}, -1, 1))});
  const int add = b.node("Add", {mm, b.init("bias", test::random_tensor<float>(Shape{40}, -1, 1))});
  b.g.values[add].name = "logits";
  b.g.value_ids["logits"] = add;
  b.g.outputs = {add};
  append_sampler(b.g, "logits");
  const size_t nodes = b.g.nodes.size();
  EXPECT_FALSE(slice_prompt_logits(b.g, "logits"));
  EXPECT_EQ(b.g.nodes.size(), nodes);
  EXPECT_FALSE(slice_prompt_logits(b.g, "no_such_value"));
}

// The fixture's decoder as the CPU runs it (the pass pipeline's defaults) is matched.
TEST(PromptLogits, TheTinyLlamaFixturesHeadIsMatched) {
  const std::string path =
      (std::filesystem::path(ONYX_SOURCE_DIR) / "tests/fixtures/genai/llama-optimum/model.onnx").string();
  Model m = load_model(path);
  optimize_graph(*m.graph, SessionOptions{}, Device::cpu());
  append_sampler(*m.graph, "logits");
  ASSERT_TRUE(slice_prompt_logits(*m.graph, "logits"));
  const Node& head = m.graph->nodes[m.graph->values[m.graph->find_value("logits")].producer];
  EXPECT_EQ(head.op_type, "DenseMatMul");
  EXPECT_EQ(m.graph->nodes[m.graph->values[head.inputs[0]].producer].op_type, "Slice");
}

}  // namespace onyx::genai
