#include "model/inline_functions.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "onyx/error.h"

namespace onyx {

namespace {

// The length-delimited fields numbered `field` among a message's unknown fields: the schema
// onyx compiles (ONNX 1.12) predates FunctionProto's attribute_proto (11) and overload (13)
// and NodeProto's overload (8), which newer exporters write.
std::vector<std::string> unknown_strings(const std::string& unknown, int field) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(unknown.data()),
                                            static_cast<int>(unknown.size()));
  std::vector<std::string> found;
  while (uint32_t tag = in.ReadTag()) {
    if (static_cast<int>(tag >> 3) == field &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      uint32_t len = 0;
      std::string bytes;
      ONYX_CHECK(in.ReadVarint32(&len) && in.ReadString(&bytes, static_cast<int>(len)), "truncated field ", field);
      found.push_back(std::move(bytes));
    } else {
      ONYX_CHECK(WireFormatLite::SkipField(&in, tag), "malformed unknown field ", (tag >> 3));
    }
  }
  return found;
}

std::string overload_of(const std::string& unknown, int field) {
  auto v = unknown_strings(unknown, field);
  return v.empty() ? "" : v.back();
}

struct Function {
  const onnx::FunctionProto* proto = nullptr;
  std::map<std::string, onnx::AttributeProto> defaults;  // attribute_proto, by name
};

using Key = std::tuple<std::string, std::string, std::string>;  // domain, name, overload

std::string normalized(const std::string& domain) { return domain == "ai.onnx" ? "" : domain; }

class Inliner {
 public:
  explicit Inliner(onnx::ModelProto& mp) : mp_(mp) {
    for (const auto& f : mp.functions()) {
      Function fn;
      fn.proto = &f;
      for (const auto& bytes : unknown_strings(f.unknown_fields(), 11)) {
        onnx::AttributeProto a;
        ONYX_CHECK(a.ParseFromString(bytes), "function '", f.name(), "': a default attribute is not a valid AttributeProto");
        fn.defaults[a.name()] = a;
      }
      const Key key{normalized(f.domain()), f.name(), overload_of(f.unknown_fields(), 13)};
      ONYX_CHECK(functions_.emplace(key, fn).second, "function '", f.domain(), "::", f.name(), "' is defined twice");
    }
    for (const auto& op : mp.opset_import()) opsets_[normalized(op.domain())] = op.version();
  }

  void run() {
    // Calls can nest a few levels and multiply into more nodes than memory holds: count first.
    ONYX_CHECK(graph_cost(mp_.graph()) <= kMaxNodes, "inlining the model's functions would make more than ",
               kMaxNodes, " nodes");
    inline_graph(*mp_.mutable_graph(), 0);
    for (const auto& [domain, version] : added_opsets_) {
      auto* op = mp_.add_opset_import();
      op->set_domain(domain);
      op->set_version(version);
    }
    mp_.clear_functions();
  }

 private:
  static constexpr int64_t kMaxNodes = int64_t{1} << 20;
  static constexpr int kMaxDepth = 256;  // keeps the recursion within the stack

  int64_t graph_cost(const onnx::GraphProto& g, int depth = 0) {
    int64_t total = 0;
    for (const auto& n : g.node()) total = std::min(total + node_cost(n, depth), kMaxNodes + 1);
    return total;
  }

  int64_t node_cost(const onnx::NodeProto& n, int depth) {
    ONYX_CHECK(depth < kMaxDepth, "function calls nest more than ", kMaxDepth, " deep");
    int64_t total = 0;
    for (const auto& a : n.attribute()) {
      if (a.has_g()) total = std::min(total + graph_cost(a.g(), depth + 1), kMaxNodes + 1);
      for (const auto& sg : a.graphs()) total = std::min(total + graph_cost(sg, depth + 1), kMaxNodes + 1);
    }
    const Function* fn = find(n);
    if (!fn) return std::min(total + 1, kMaxNodes + 1);
    auto it = cost_.find(fn);
    if (it == cost_.end()) {
      ONYX_CHECK(costing_.insert(fn).second, "function '", fn->proto->name(), "' calls itself (directly or through others)");
      int64_t body = 0;
      for (const auto& b : fn->proto->node()) body = std::min(body + node_cost(b, depth + 1), kMaxNodes + 1);
      costing_.erase(fn);
      it = cost_.emplace(fn, body).first;
    }
    return std::min(total + it->second, kMaxNodes + 1);
  }

  const Function* find(const onnx::NodeProto& n) const {
    auto it = functions_.find({normalized(n.domain()), n.op_type(), overload_of(n.unknown_fields(), 8)});
    return it == functions_.end() ? nullptr : &it->second;
  }

  // Inlines the calls among g's nodes, and in their subgraphs.
  void inline_graph(onnx::GraphProto& g, int depth) {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    nodes.Swap(g.mutable_node());
    for (auto& n : nodes) expand_into(n, *g.mutable_node(), depth);
  }

  // Appends n to `out`, or the nodes of the body n calls, each expanded in turn.
  void expand_into(onnx::NodeProto& n, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out, int depth) {
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) inline_graph(*a.mutable_g(), depth);
      for (auto& sg : *a.mutable_graphs()) inline_graph(sg, depth);
    }
    const Function* fn = find(n);
    if (!fn) {
      *out.Add() = std::move(n);
      return;
    }
    const onnx::FunctionProto& f = *fn->proto;
    const std::string where = cat("inlining function '", f.name(), "' at node '", n.name(), "'");
    with_context(where, [&] {
      ONYX_CHECK(depth < kMaxDepth, "function calls nest more than ", kMaxDepth, " deep");
      ONYX_CHECK(n.input_size() <= f.input_size(), "the call passes ", n.input_size(), " inputs; the function takes ",
                 f.input_size());
      ONYX_CHECK(n.output_size() <= f.output_size(), "the call takes ", n.output_size(),
                 " outputs; the function has ", f.output_size());
      check_opsets(f);
      // Formal names to the call's; missing optional inputs become "" (omitted), the rest of
      // the body's names get a prefix unique to this call.
      std::unordered_map<std::string, std::string> rename;
      for (int i = 0; i < f.input_size(); ++i) rename[f.input(i)] = i < n.input_size() ? n.input(i) : "";
      const std::string prefix = cat(n.name().empty() ? f.name() : n.name(), "/", f.name(), "#", calls_++, "/");
      for (int i = 0; i < f.output_size(); ++i)
        rename[f.output(i)] = i < n.output_size() && !n.output(i).empty() ? n.output(i) : prefix + f.output(i);
      std::map<std::string, const onnx::AttributeProto*> attrs;
      for (const auto& [name, a] : fn->defaults) attrs[name] = &a;
      for (const auto& a : n.attribute()) attrs[a.name()] = &a;
      for (const auto& body : f.node()) {
        onnx::NodeProto copy = body;
        rename_node(copy, rename, prefix, attrs);
        if (!copy.name().empty() || !n.name().empty()) copy.set_name(prefix + copy.name());
        expand_into(copy, out, depth + 1);
      }
    });
  }

  static std::string renamed(const std::string& name, std::unordered_map<std::string, std::string>& rename,
                             const std::string& prefix) {
    if (name.empty()) return name;
    auto it = rename.find(name);
    if (it != rename.end()) return it->second;
    return rename[name] = prefix + name;
  }

  // Renames a body node's values and resolves its attribute references; in subgraphs, the
  // names the subgraph defines stay and those it reads from the function are renamed.
  void rename_node(onnx::NodeProto& node, std::unordered_map<std::string, std::string>& rename,
                   const std::string& prefix, const std::map<std::string, const onnx::AttributeProto*>& attrs) {
    for (auto& s : *node.mutable_input()) s = renamed(s, rename, prefix);
    for (auto& s : *node.mutable_output()) s = renamed(s, rename, prefix);
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> kept;
    for (auto& a : *node.mutable_attribute()) {
      if (!a.ref_attr_name().empty()) {
        auto it = attrs.find(a.ref_attr_name());
        if (it == attrs.end()) continue;  // neither given nor defaulted: the attribute is absent
        onnx::AttributeProto resolved = *it->second;
        resolved.set_name(a.name());
        *kept.Add() = std::move(resolved);
        continue;
      }
      if (a.has_g()) rename_subgraph(*a.mutable_g(), rename, prefix, attrs);
      for (auto& sg : *a.mutable_graphs()) rename_subgraph(sg, rename, prefix, attrs);
      *kept.Add() = std::move(a);
    }
    node.mutable_attribute()->Swap(&kept);
  }

  void rename_subgraph(onnx::GraphProto& g, const std::unordered_map<std::string, std::string>& outer,
                       const std::string& prefix, const std::map<std::string, const onnx::AttributeProto*>& attrs) {
    // Names the subgraph defines shadow the function's; the rest are read from the function.
    std::unordered_map<std::string, std::string> scope = outer;
    auto own = [&](const std::string& name) { scope[name] = name; };
    for (const auto& v : g.input()) own(v.name());
    for (const auto& t : g.initializer()) own(t.name());
    for (const auto& n : g.node())
      for (const auto& o : n.output()) own(o);
    // A name read here that the function does not know is the function's own value, defined
    // in its body after being referenced here: give it the body's prefix.
    for (auto& n : *g.mutable_node()) rename_node(n, scope, prefix, attrs);
    for (auto& v : *g.mutable_output()) v.set_name(renamed(v.name(), scope, prefix));
  }

  void check_opsets(const onnx::FunctionProto& f) {
    for (const auto& op : f.opset_import()) {
      const std::string d = normalized(op.domain());
      auto it = opsets_.find(d);
      if (it == opsets_.end()) {
        opsets_[d] = op.version();
        added_opsets_[d] = op.version();
        continue;
      }
      ONYX_CHECK(it->second == op.version(), "the function imports opset ", op.version(), " of domain '",
                 d.empty() ? "ai.onnx" : d, "', the model ", it->second, "; onyx runs a model at one opset per domain");
    }
  }

  onnx::ModelProto& mp_;
  std::map<Key, Function> functions_;
  std::map<std::string, int64_t> opsets_, added_opsets_;
  int calls_ = 0;
  std::map<const Function*, int64_t> cost_;      // nodes a call expands to (capped)
  std::set<const Function*> costing_;            // on the stack: a cycle when met again
};

}  // namespace

void inline_functions(onnx::ModelProto& mp) {
  if (mp.functions_size() == 0) return;
  Inliner inliner(mp);
  inliner.run();
}

}  // namespace onyx
