// onyx's in-memory form of an ONNX model: graphs, nodes, values, attributes.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "onyx/tensor.h"

namespace onyx {

struct Graph;
struct OpDef;

// The type a model declares for a value; dims < 0 are unknown (then `dim_params`
// may hold the symbolic name). Sequences and optionals have dtype kSequence/kOptional and
// their elements' type in `elem_dtype` (kSequence for an optional sequence).
struct TypeInfo {
  enum class Category { kUnknown, kTensor, kSequence, kOptional, kMap, kSparse };
  Category category = Category::kUnknown;
  DType dtype = DType::kUndefined;
  DType elem_dtype = DType::kUndefined;
  bool rank_known = false;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_params;
  std::string str() const;  // "float32[batch,64]"
};

struct Attribute {
  enum class Kind { kFloat, kInt, kString, kTensor, kGraph, kFloats, kInts, kStrings, kTensors, kGraphs, kType };
  std::string name;
  Kind kind = Kind::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  TypeInfo type;  // kType (the Optional op's `type`)
};
std::string_view attribute_kind_name(Attribute::Kind k);

struct Value {
  std::string name;
  TypeInfo declared;
  int producer = -1;         // node index in Graph::nodes, or -1
  bool is_input = false;     // a graph input (fed by the caller)
  bool is_initializer = false;
  bool is_outer = false;     // defined by an enclosing graph (subgraphs only)
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;           // "" for the default ONNX domain
  int opset = 0;                // the opset version that applies to this node's domain
  std::vector<int> inputs;      // value ids; -1 for an omitted optional input
  std::vector<int> outputs;     // value ids; -1 for an omitted optional output
  std::vector<Attribute> attributes;
  // Values of this graph that the node's subgraphs read from outer scope.
  std::vector<int> implicit_inputs;
  const OpDef* def = nullptr;   // resolved at session creation

  const Attribute* find_attribute(std::string_view attr_name) const;
  // "node 'name' (Op)" or "node #index (Op)" for error contexts.
  std::string describe() const;
};

struct Graph {
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;     // topologically sorted after loading
  std::vector<int> inputs;     // value ids, in declaration order
  std::vector<int> outputs;
  std::unordered_map<int, Tensor> initializers;  // by value id
  std::vector<int> outer_values;                  // value ids with is_outer
  std::unordered_map<std::string, int> value_ids;

  // Returns the id of the value named `value_name`, creating an undefined one if needed.
  int value_id(const std::string& value_name);
  int find_value(const std::string& value_name) const;  // -1 when absent
  const Value& value(int id) const { return values[id]; }
};

struct Model {
  int64_t ir_version = 0;
  std::map<std::string, int> opsets;  // domain ("" for ai.onnx) -> version
  std::string producer;
  std::string producer_version, domain, doc_string, graph_name, graph_doc_string;
  int64_t model_version = 0;
  std::map<std::string, std::string> metadata;  // metadata_props
  std::string path;                   // the file it came from
  std::shared_ptr<Graph> graph;
  std::shared_ptr<const void> keepalive;  // owns memory that initializers borrow
  int opset(const std::string& domain) const;
  int64_t initializer_bytes() const;
};

// "" and "ai.onnx" both name the default domain.
std::string normalize_domain(const std::string& domain);

}  // namespace onyx
