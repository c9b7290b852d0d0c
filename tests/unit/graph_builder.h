// Builds small graphs node by node for the tests of the load-time passes.
#pragma once

#include <string>
#include <vector>

#include "model/ir.h"

namespace onyx::test {

struct GraphBuilder {
  Graph g;
  int value(const std::string& n) { return g.value_id(n); }
  // A graph input, fed by the caller.
  int input(const std::string& n) {
    const int id = g.value_id(n);
    g.values[id].is_input = true;
    g.inputs.push_back(id);
    return id;
  }
  // A graph input of a declared type (dims < 0: unknown).
  int input(const std::string& n, DType dtype, std::vector<int64_t> dims) {
    const int id = input(n);
    TypeInfo& t = g.values[id].declared;
    t.category = TypeInfo::Category::kTensor;
    t.dtype = dtype;
    t.rank_known = true;
    t.dim_params.assign(dims.size(), "");
    t.dims = std::move(dims);
    return id;
  }
  int init(const std::string& n, Tensor t) {
    const int id = g.value_id(n);
    g.values[id].is_initializer = true;
    g.initializers[id] = std::move(t);
    return id;
  }
  // An ai.onnx node of opset 18 with one output; returns the output's value id.
  int node(const std::string& op, std::vector<int> in, std::vector<Attribute> attrs = {}) {
    Node n;
    n.name = op + std::to_string(g.nodes.size());
    n.op_type = op;
    n.opset = 18;
    n.inputs = std::move(in);
    const int out = g.value_id(n.name + "_out");
    n.outputs = {out};
    n.attributes = std::move(attrs);
    g.values[out].producer = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(n));
    return out;
  }
};

}  // namespace onyx::test
