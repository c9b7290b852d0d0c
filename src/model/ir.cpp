#include "model/ir.h"

namespace onyx {

std::string_view attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::kFloat: return "float";
    case Attribute::Kind::kInt: return "int";
    case Attribute::Kind::kString: return "string";
    case Attribute::Kind::kTensor: return "tensor";
    case Attribute::Kind::kGraph: return "graph";
    case Attribute::Kind::kFloats: return "floats";
    case Attribute::Kind::kInts: return "ints";
    case Attribute::Kind::kStrings: return "strings";
    case Attribute::Kind::kTensors: return "tensors";
    case Attribute::Kind::kGraphs: return "graphs";
    case Attribute::Kind::kType: return "type";
  }
  return "?";
}

std::string TypeInfo::str() const {
  switch (category) {
    case Category::kUnknown: return "unknown";
    case Category::kSequence: return elem_dtype == DType::kUndefined ? "sequence" : cat("sequence<", dtype_name(elem_dtype), ">");
    case Category::kOptional: return elem_dtype == DType::kUndefined ? "optional" : cat("optional<", dtype_name(elem_dtype), ">");
    case Category::kMap: return elem_dtype == DType::kUndefined ? "map" : cat("map<", dtype_name(elem_dtype), ">");
    case Category::kSparse: return "sparse_tensor";
    case Category::kTensor: break;
  }
  std::string s(dtype_name(dtype));
  if (!rank_known) return s + "[?]";
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    if (dims[i] >= 0) s += std::to_string(dims[i]);
    else if (i < dim_params.size() && !dim_params[i].empty()) s += dim_params[i];
    else s += "?";
  }
  return s + "]";
}

const Attribute* Node::find_attribute(std::string_view attr_name) const {
  for (const auto& a : attributes)
    if (a.name == attr_name) return &a;
  return nullptr;
}

std::string Node::describe() const {
  std::string d = domain.empty() ? op_type : domain + "::" + op_type;
  return name.empty() ? cat("node (", d, ")") : cat("node '", name, "' (", d, ")");
}

int Graph::value_id(const std::string& value_name) {
  auto it = value_ids.find(value_name);
  if (it != value_ids.end()) return it->second;
  int id = static_cast<int>(values.size());
  values.push_back(Value{value_name, {}, -1, false, false, false});
  value_ids.emplace(value_name, id);
  return id;
}

int Graph::find_value(const std::string& value_name) const {
  auto it = value_ids.find(value_name);
  return it == value_ids.end() ? -1 : it->second;
}

int Model::opset(const std::string& domain) const {
  auto it = opsets.find(normalize_domain(domain));
  return it == opsets.end() ? 0 : it->second;
}

int64_t Model::initializer_bytes() const {
  int64_t total = 0;
  for (const auto& [id, t] : graph->initializers) total += static_cast<int64_t>(t.bytes());
  return total;
}

std::string normalize_domain(const std::string& domain) { return domain == "ai.onnx" ? "" : domain; }

}  // namespace onyx
