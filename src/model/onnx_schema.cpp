#include "model/onnx_schema.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "onyx/error.h"

namespace onyx {

namespace {

struct Schema {
  std::string_view domain, name;
  int since;
  int min_inputs, max_inputs, min_outputs, max_outputs;  // max -1: unbounded
  std::string_view inputs, outputs;                      // a letter per formal parameter: s, o, v
  std::string_view attributes;                           // "name:kind[!],..."
};

constexpr Schema kSchemas[] = {
#define ONYX_SCHEMA(domain, name, since, min_in, max_in, min_out, max_out, ins, outs, attrs) \
  {domain, name, since, min_in, max_in, min_out, max_out, ins, outs, attrs},
#include "model/onnx_schemas.inc"
#undef ONYX_SCHEMA
};

constexpr std::pair<std::string_view, int> kOpsets[] = {
#define ONYX_OPSET(domain, version) {domain, version},
#include "model/onnx_schemas.inc"
#undef ONYX_OPSET
};

// Every version of each (domain, op), oldest first (the table is sorted so).
const std::map<std::pair<std::string_view, std::string_view>, std::vector<const Schema*>>& by_op() {
  static const auto* table = [] {
    auto* t = new std::map<std::pair<std::string_view, std::string_view>, std::vector<const Schema*>>();
    for (const Schema& s : kSchemas) (*t)[{s.domain, s.name}].push_back(&s);
    return t;
  }();
  return *table;
}

const Schema* find_schema(const std::string& domain, const std::string& name, int opset) {
  auto it = by_op().find({domain, name});
  if (it == by_op().end()) return nullptr;
  const Schema* found = nullptr;
  for (const Schema* s : it->second)
    if (s->since <= opset) found = s;
  return found;
}

char kind_letter(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::kFloat: return 'f';
    case Attribute::Kind::kInt: return 'i';
    case Attribute::Kind::kString: return 's';
    case Attribute::Kind::kTensor: return 't';
    case Attribute::Kind::kGraph: return 'g';
    case Attribute::Kind::kFloats: return 'F';
    case Attribute::Kind::kInts: return 'I';
    case Attribute::Kind::kStrings: return 'S';
    case Attribute::Kind::kTensors: return 'T';
    case Attribute::Kind::kGraphs: return 'G';
    case Attribute::Kind::kType: return 'y';
  }
  return '?';
}

std::string_view letter_kind_name(char c) {
  switch (c) {
    case 'f': return "float";
    case 'i': return "int";
    case 's': return "string";
    case 't': return "tensor";
    case 'g': return "graph";
    case 'F': return "floats";
    case 'I': return "ints";
    case 'S': return "strings";
    case 'T': return "tensors";
    case 'G': return "graphs";
    case 'p': return "sparse_tensor";
    case 'P': return "sparse_tensors";
    case 'y': return "type_proto";
    case 'Y': return "type_protos";
  }
  return "?";
}

struct AttrSpec {
  std::string_view name;
  char kind;
  bool required;
};

std::vector<AttrSpec> parse_attributes(std::string_view spec) {
  std::vector<AttrSpec> out;
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    size_t colon = item.find(':');
    out.push_back({item.substr(0, colon), item[colon + 1], item.size() > colon + 2 && item[colon + 2] == '!'});
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
  }
  return out;
}

// "1 input", "2 inputs"
std::string count_of(int64_t n, std::string_view what) { return cat(n, " ", what, n == 1 ? "" : "s"); }

std::string count_range(int lo, int hi, std::string_view what) {
  if (hi < 0) return cat("at least ", count_of(lo, what));
  if (lo == hi) return count_of(lo, what);
  return cat(lo, " to ", count_of(hi, what));
}

// The formal parameter (s, o or v) that position `i` binds to (the counts are checked first).
char formal_at(std::string_view formals, size_t i) {
  if (i < formals.size()) return formals[i];
  return formals.empty() ? 'v' : formals.back();
}

void check_arity(const Node& node, const Schema& s, const std::string& op, bool inputs) {
  const std::vector<int>& ids = inputs ? node.inputs : node.outputs;
  const int n = static_cast<int>(ids.size());
  const int lo = inputs ? s.min_inputs : s.min_outputs;
  const int hi = inputs ? s.max_inputs : s.max_outputs;
  const char* what = inputs ? "input" : "output";
  ONYX_CHECK(n >= lo && (hi < 0 || n <= hi), "the node has ", count_of(n, what), ", but ", op, " takes ",
             count_range(lo, hi, what), " (ONNX operator schema)");
  const std::string_view formals = inputs ? s.inputs : s.outputs;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= 0) continue;
    // As the ONNX checker has it: only a single parameter may not be omitted (a variadic one may).
    ONYX_CHECK(formal_at(formals, i) != 's', inputs ? "input " : "output ", i, " is omitted (an empty name), but ", op,
               "'s ", inputs ? "input " : "output ", i, " is not optional (ONNX operator schema)");
  }
}

void check_attributes(const Node& node, const Schema& s, const std::string& op) {
  const std::vector<AttrSpec> specs = parse_attributes(s.attributes);
  std::unordered_set<std::string_view> seen;
  for (const Attribute& a : node.attributes) {
    ONYX_CHECK(seen.insert(a.name).second, "attribute '", a.name, "' is given twice");
    auto spec = std::find_if(specs.begin(), specs.end(), [&](const AttrSpec& x) { return x.name == a.name; });
    ONYX_CHECK(spec != specs.end(), "attribute '", a.name, "' is not an attribute of ", op, " (ONNX operator schema)");
    ONYX_CHECK(kind_letter(a.kind) == spec->kind, "attribute '", a.name, "' is of type ",
               attribute_kind_name(a.kind), ", but ", op, " declares it ", letter_kind_name(spec->kind),
               " (ONNX operator schema)");
  }
  for (const AttrSpec& spec : specs)
    ONYX_CHECK(!spec.required || node.find_attribute(spec.name), "required attribute '", spec.name, "' of ", op,
               " is missing (ONNX operator schema)");
}

const Graph& graph_attribute(const Node& node, const char* name) {
  const Attribute* a = node.find_attribute(name);
  ONYX_ASSERT(a && a->g, "checked by the schema: ", name);
  return *a->g;
}

// What a value's declaration says of its type, for comparing two declarations: a tensor's
// element type; empty when it says nothing to compare (no element type, or not a tensor: an
// optional sequence may take a sequence's place).
std::string declared_kind(const TypeInfo& t) {
  if (t.category != TypeInfo::Category::kTensor || t.dtype == DType::kUndefined) return "";
  return cat("tensor(", dtype_name(t.dtype), ")");
}

void check_same_declaration(const Graph& a, int a_id, const char* a_what, const Graph& b, int b_id,
                            const char* b_what, const std::string& rule) {
  const std::string ka = declared_kind(a.values[a_id].declared), kb = declared_kind(b.values[b_id].declared);
  ONYX_CHECK(ka.empty() || kb.empty() || ka == kb, a_what, " '", a.values[a_id].name, "' is declared ", ka, " but ",
             b_what, " '", b.values[b_id].name, "' is ", kb, " (", rule, ")");
}

// The signatures of the subgraphs of If, Loop and Scan against their node and each other.
void check_control_flow(const Node& node) {
  if (node.op_type == "If") {
    const Graph& then_g = graph_attribute(node, "then_branch");
    const Graph& else_g = graph_attribute(node, "else_branch");
    const std::string rule = "the branches of an If produce the If's outputs, alike in number and type";
    ONYX_CHECK(then_g.outputs.size() == else_g.outputs.size(), "then_branch has ", count_of(then_g.outputs.size(), "output"),
               " and else_branch ", else_g.outputs.size(), " (", rule, ")");
    ONYX_CHECK(then_g.outputs.size() == node.outputs.size(), "the node has ", count_of(node.outputs.size(), "output"),
               ", but its branches produce ", then_g.outputs.size(), " (", rule, ")");
    for (size_t i = 0; i < then_g.outputs.size(); ++i)
      with_context(cat("output ", i), [&] {
        check_same_declaration(then_g, then_g.outputs[i], "then_branch's output", else_g, else_g.outputs[i],
                               "else_branch's", rule);
      });
  } else if (node.op_type == "Loop") {
    const Graph& body = graph_attribute(node, "body");
    // Inputs: M, cond, N loop-carried values; the body takes (iteration, cond, the N values)
    // and returns (cond, the N values, K scan outputs); the node returns the N values and K scans.
    const size_t carried = node.inputs.size() - 2;
    const std::string rule = "a Loop body takes the iteration number, the condition and the loop-carried values, "
                             "and returns the condition, the loop-carried values and the scan outputs";
    ONYX_CHECK(body.inputs.size() == carried + 2, "the body has ", count_of(body.inputs.size(), "input"),
               ", but the node carries ", count_of(carried, "value"), ", so it takes ", carried + 2, " (", rule, ")");
    ONYX_CHECK(body.outputs.size() >= carried + 1, "the body has ", count_of(body.outputs.size(), "output"),
               ", but the node carries ", count_of(carried, "value"), ", so it returns at least ", carried + 1, " (",
               rule, ")");
    ONYX_CHECK(node.outputs.size() == body.outputs.size() - 1, "the node has ", count_of(node.outputs.size(), "output"),
               ", but its body returns ", body.outputs.size() - 1, " loop-carried values and scan outputs (", rule,
               ")");
    for (size_t i = 0; i < carried; ++i)
      with_context(cat("loop-carried value ", i), [&] {
        check_same_declaration(body, body.inputs[i + 2], "the body's input", body, body.outputs[i + 1], "its output",
                               "a loop-carried value keeps its type");
      });
  } else if (node.op_type == "Scan") {
    const Graph& body = graph_attribute(node, "body");
    // Opset 8 has sequence_lens before the states and scanned inputs; later opsets do not.
    const size_t skip = node.opset < 9 ? 1 : 0;
    ONYX_CHECK(node.inputs.size() >= skip, "Scan-8 takes sequence_lens first");
    const size_t fed = node.inputs.size() - skip;
    const std::string rule = "a Scan body takes the states and one slice of each scanned input, and returns the "
                             "states and one slice of each scan output";
    ONYX_CHECK(body.inputs.size() == fed, "the body has ", count_of(body.inputs.size(), "input"),
               ", but the node feeds it ", fed, " (", rule, ")");
    ONYX_CHECK(body.outputs.size() == node.outputs.size(), "the body has ", count_of(body.outputs.size(), "output"),
               ", but the node has ", node.outputs.size(), " (", rule, ")");
    const int64_t scanned = node.find_attribute("num_scan_inputs") ? node.find_attribute("num_scan_inputs")->i : 0;
    ONYX_CHECK(scanned >= 1 && static_cast<size_t>(scanned) <= fed, "num_scan_inputs is ", scanned,
               ", but the node feeds ", fed, " values to its body (states and scanned inputs)");
    const size_t states = fed - static_cast<size_t>(scanned);
    ONYX_CHECK(states <= body.outputs.size(), "the node has ", count_of(states, "state"), ", but its body returns ",
               body.outputs.size(), " values (", rule, ")");
    for (size_t i = 0; i < states; ++i)
      with_context(cat("state ", i), [&] {
        check_same_declaration(body, body.inputs[i], "the body's input", body, body.outputs[i], "its output",
                               "a Scan state keeps its type");
      });
  }
}

}  // namespace

void check_opset_import(const std::string& domain, int64_t version) {
  ONYX_CHECK(version <= INT32_MAX, "the model imports opset ", version, " of domain '", domain, "': not a version");
  for (const auto& [d, highest] : kOpsets) {
    if (d != domain) continue;
    const std::string name = domain.empty() ? "ai.onnx" : domain;
    ONYX_CHECK(version >= 1 && version <= highest, "the model imports opset ", version, " of domain '", name,
               "', but ONNX defines its opsets 1 to ", highest);
  }
}

void check_declared_dtype(const Graph& g, int id, DType inferred) {
  if (id < 0 || inferred == DType::kUndefined) return;
  const Value& v = g.values[id];
  const auto c = v.declared.category;
  if (c == TypeInfo::Category::kSequence || c == TypeInfo::Category::kOptional) {
    // An optional sequence may take a sequence's place and the other way round.
    ONYX_CHECK(inferred == DType::kSequence || inferred == DType::kOptional, "output '", v.name, "' is ",
               dtype_name(inferred), ", but the model declares it ", v.declared.str());
    return;
  }
  if (c == TypeInfo::Category::kMap) {
    ONYX_CHECK(inferred == DType::kMap, "output '", v.name, "' is ", dtype_name(inferred), ", but the model declares it ",
               v.declared.str());
    return;
  }
  if (c != TypeInfo::Category::kTensor || v.declared.dtype == DType::kUndefined) return;
  ONYX_CHECK(v.declared.dtype == inferred, "output '", v.name, "' is ", dtype_name(inferred),
             ", but the model declares it ", dtype_name(v.declared.dtype),
             " (a value's declared type must be the type its node produces)");
}

void check_node_schema(const Node& node) {
  const Schema* s = find_schema(node.domain, node.op_type, node.opset);
  if (!s) return;
  const std::string op = cat(node.op_type, "-", s->since);
  check_arity(node, *s, op, true);
  check_arity(node, *s, op, false);
  check_attributes(node, *s, op);
  if (node.domain.empty()) check_control_flow(node);
}

}  // namespace onyx
