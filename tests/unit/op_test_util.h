// Running a single op in a one-node graph, for op unit tests.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "exec/executor.h"
#include "ops/compute.h"
#include "model/ir.h"
#include "common/attributes.h"

namespace onyx::test {

// Builds graph inputs x0..xN-1 (an undefined tensor marks an omitted optional
// input), one node, outputs y0..yM-1, and runs it. Throws what the op throws.
// `initializers[i]` makes input i an initializer (known while planning) instead of a feed.
inline std::vector<Tensor> run_op(const std::string& op_type, const std::vector<Tensor>& inputs,
                                  std::vector<Attribute> attrs = {}, size_t num_outputs = 1, int opset = 18,
                                  const std::string& domain = "", const std::vector<bool>& initializers = {}) {
  Graph g;
  g.name = "test";
  Node n;
  n.name = "node_under_test";
  n.op_type = op_type;
  n.domain = domain;
  n.opset = opset;
  n.attributes = std::move(attrs);
  std::vector<Tensor> feeds;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      n.inputs.push_back(-1);
      continue;
    }
    int id = g.value_id(cat("x", i));
    if (i < initializers.size() && initializers[i]) {
      g.values[id].is_initializer = true;
      g.initializers[id] = inputs[i];
    } else {
      g.values[id].is_input = true;
      g.inputs.push_back(id);
      feeds.push_back(inputs[i]);
    }
    n.inputs.push_back(id);
  }
  for (size_t o = 0; o < num_outputs; ++o) {
    int id = g.value_id(cat("y", o));
    g.values[id].producer = 0;
    n.outputs.push_back(id);
    g.outputs.push_back(id);
  }
  g.nodes.push_back(std::move(n));
  GraphExecutor exec(g, OpRegistry::global(), make_cpu_allocator());
  return exec.run(feeds);
}

// Runs one node's inference and kernel directly (no graph, no planner), so that what
// the op itself returns can be seen: a view op's output shares its input's storage.
inline std::vector<Tensor> compute_op(const std::string& op_type, const std::vector<Tensor>& inputs,
                                      std::vector<Attribute> attrs = {}, size_t num_outputs = 1, int opset = 18,
                                      const std::string& domain = "") {
  Node n;
  n.name = "node_under_test";
  n.op_type = op_type;
  n.domain = domain;
  n.opset = opset;
  n.attributes = std::move(attrs);
  std::vector<const Tensor*> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    n.inputs.push_back(inputs[i].defined() ? static_cast<int>(i) : -1);
    in.push_back(inputs[i].defined() ? &inputs[i] : nullptr);
  }
  for (size_t o = 0; o < num_outputs; ++o) n.outputs.push_back(static_cast<int>(inputs.size() + o));
  resolve_op(n, OpRegistry::global());
  return compute_node(n, in, cpu_allocator());
}

// Fresh random values every call (never zeros): normal(0, scale) for floats,
// uniform [lo, hi] for integers.
inline std::mt19937_64& rng() {
  static std::mt19937_64 r(std::random_device{}());
  return r;
}

template <class T>
Tensor random_tensor(Shape shape, double lo = -3, double hi = 3) {
  Tensor t(dtype_of<T>, std::move(shape));
  T* p = t.data<T>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if constexpr (std::is_same_v<T, bool>) {
      p[i] = std::uniform_int_distribution<int>(0, 1)(rng());
    } else if constexpr (std::is_integral_v<T>) {
      p[i] = static_cast<T>(std::uniform_int_distribution<int64_t>(static_cast<int64_t>(lo), static_cast<int64_t>(hi))(rng()));
    } else {
      p[i] = static_cast<T>(static_cast<float>(std::uniform_real_distribution<double>(lo, hi)(rng())));
    }
  }
  return t;
}

}  // namespace onyx::test
