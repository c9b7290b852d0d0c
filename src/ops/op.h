// What an operator is to onyx: shape/type inference plus a CPU reference kernel,
// registered once per (domain, name, since-version) and shared by every backend.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/ir.h"
#include "onyx/tensor.h"

namespace onyx {

// Attribute and arity access, common to inference and kernels.
class NodeView {
 public:
  explicit NodeView(const Node& node) : node_(node) {}
  const Node& node() const { return node_; }
  int opset() const { return node_.opset; }

  size_t num_inputs() const { return node_.inputs.size(); }
  bool has_input(size_t i) const { return i < node_.inputs.size() && node_.inputs[i] >= 0; }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_output(size_t i) const { return i < node_.outputs.size() && node_.outputs[i] >= 0; }

  bool has_attr(std::string_view name) const { return node_.find_attribute(name) != nullptr; }
  int64_t attr_int(std::string_view name) const;  // required
  int64_t attr_int(std::string_view name, int64_t fallback) const;
  float attr_float(std::string_view name, float fallback) const;
  std::string attr_string(std::string_view name, std::string fallback) const;
  std::vector<int64_t> attr_ints(std::string_view name, std::vector<int64_t> fallback = {}) const;
  std::vector<float> attr_floats(std::string_view name, std::vector<float> fallback = {}) const;
  std::vector<std::string> attr_strings(std::string_view name) const;
  const Tensor* attr_tensor(std::string_view name) const;  // null when absent
  const Graph* attr_graph(std::string_view name) const;    // null when absent

 private:
  const Attribute* typed(std::string_view name, Attribute::Kind kind) const;
  const Node& node_;
};

// The type of a value as inference knows it.
struct ValueType {
  DType dtype = DType::kUndefined;
  PartialShape shape;
};

class InferContext : public NodeView {
 public:
  // `values[i]` is the input's tensor when its contents are known (always, when executing).
  InferContext(const Node& node, std::vector<ValueType> inputs, std::vector<const Tensor*> values);

  DType input_dtype(size_t i) const;
  const PartialShape& input_shape(size_t i) const;
  // The input's contents, or null when they are not known (planning without data).
  const Tensor* input_value(size_t i) const;
  // Like input_shape, but requires the shape to be fully known.
  Shape input_concrete_shape(size_t i) const;
  void set_output(size_t i, DType dtype, PartialShape shape);
  const std::vector<ValueType>& outputs() const { return outputs_; }

 private:
  std::vector<ValueType> inputs_;
  std::vector<const Tensor*> values_;
  std::vector<ValueType> outputs_;
};

// Runs a subgraph of the current node (If branches, Loop and Scan bodies).
using SubgraphRunner =
    std::function<std::vector<Tensor>(const Graph& graph, const std::vector<Tensor>& inputs)>;

class KernelContext : public NodeView {
 public:
  // `inputs` (null: an omitted input) and `outputs` are the caller's and outlive the
  // context: the step loop passes the scratch lists of its run, sized once.
  KernelContext(const Node& node, std::span<const Tensor* const> inputs, std::span<Tensor> outputs,
                Allocator& alloc, const SubgraphRunner* subgraphs)
      : NodeView(node), inputs_(inputs), outputs_(outputs), alloc_(alloc), subgraphs_(subgraphs) {}
  // The same, the context holding the list of inputs.
  KernelContext(const Node& node, std::vector<const Tensor*> inputs, std::span<Tensor> outputs, Allocator& alloc,
                const SubgraphRunner* subgraphs)
      : NodeView(node), owned_inputs_(std::move(inputs)), inputs_(owned_inputs_), outputs_(outputs), alloc_(alloc),
        subgraphs_(subgraphs) {}
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  const Tensor& input(size_t i) const;
  // The output, already allocated with the shape that inference gave.
  Tensor& output(size_t i);
  // For outputs whose shape depends on data (inference left it unknown).
  Tensor& allocate_output(size_t i, DType dtype, Shape shape);
  // Hands over an existing tensor as output i (e.g. a subgraph's result).
  void set_output(size_t i, Tensor t);
  Allocator& allocator() const { return alloc_; }
  std::vector<Tensor> run_subgraph(const Graph& graph, const std::vector<Tensor>& inputs) const;

 private:
  std::vector<const Tensor*> owned_inputs_;
  std::span<const Tensor* const> inputs_;
  std::span<Tensor> outputs_;
  Allocator& alloc_;
  const SubgraphRunner* subgraphs_;
};

using InferFn = std::function<void(InferContext&)>;
using KernelFn = std::function<void(KernelContext&)>;

// An operator: inference, the CPU reference kernel, and the facts that the planner
// and the executor read about it, all declared here at registration (one home).
// Registration spells it one way:
//   r.add(onnx_op("Reshape", 5, infer_reshape).view(0, 0).reads_values({1}));
struct OpDef {
  std::string domain;  // "" for ai.onnx
  std::string name;
  int since_version = 1;
  InferFn infer;
  KernelFn kernel;
  // (output, input) pairs: that output shares that input's storage (Reshape and
  // friends). The executor makes such outputs itself; the kernel never sees them.
  std::vector<std::pair<int, int>> views;
  // Inputs whose contents inference reads (a Reshape's shape, a Slice's starts):
  // they must be known while planning, or on the host when inferring at run time.
  std::vector<int> value_inputs;
  // Inputs whose storage output 0 may take when the input dies at this node and has
  // the output's size: the CPU kernel reads each element before writing the element
  // at the same index.
  std::vector<int> in_place_inputs;
  // Reads only its inputs' dtypes and shapes (Shape, Size): its output is known
  // while planning, and it moves no bytes whatever device its input is on.
  bool metadata_only = false;
  // False for ops whose output differs between runs on the same inputs (random ops):
  // never computed while planning.
  bool foldable = true;
  // (output, input) pairs: the caller may bind that output to the tensor it feeds as that
  // input (RunOptions::bound_outputs); the kernel then updates the input in place, writing
  // only what changes (a KV cache). Other ops refuse such a binding.
  std::vector<std::pair<int, int>> updates;
  // Makes `kernel` for one node, reading what it needs of the node's attributes once: the
  // planner resolves a step's CPU kernel through it, so a run looks no attribute up by name.
  // It must compute what `kernel` computes. Null: `kernel` serves every node.
  std::function<KernelFn(const Node&)> specialize;

  OpDef& view(int output, int input) {
    views.emplace_back(output, input);
    return *this;
  }
  OpDef& reads_values(std::vector<int> inputs) {
    value_inputs = std::move(inputs);
    return *this;
  }
  OpDef& in_place(std::vector<int> inputs) {
    in_place_inputs = std::move(inputs);
    return *this;
  }
  OpDef& reads_only_metadata() {
    metadata_only = true;
    return *this;
  }
  OpDef& never_fold() {
    foldable = false;
    return *this;
  }
  OpDef& specialized(std::function<KernelFn(const Node&)> make) {
    specialize = std::move(make);
    return *this;
  }
  OpDef& may_update(int output, int input) {
    updates.emplace_back(output, input);
    return *this;
  }
  // Every output is a view of an input: no kernel runs.
  bool is_view() const { return !views.empty(); }
};

OpDef onnx_op(std::string name, int since, InferFn infer, KernelFn kernel = nullptr);
OpDef domain_op(std::string domain, std::string name, int since, InferFn infer, KernelFn kernel = nullptr);

}  // namespace onyx
