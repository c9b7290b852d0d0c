#include "model/loader.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <unistd.h>
#include <google/protobuf/wire_format_lite.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <queue>
#include <unordered_set>

#include "model/expand_gradient.h"
#include "model/inline_functions.h"
#include "model/mapped_file.h"
#include "model/onnx_schema.h"
#include "model/tensor_proto.h"
#include "onnx/onnx.pb.h"

namespace onyx {

namespace {

TypeInfo type_from_proto(const onnx::TypeProto& tp) {
  TypeInfo info;
  switch (tp.value_case()) {
    case onnx::TypeProto::kTensorType: {
      info.category = TypeInfo::Category::kTensor;
      const auto& tt = tp.tensor_type();
      if (tt.elem_type() != 0) {
        try {
          info.dtype = dtype_from_onnx(tt.elem_type());
        } catch (const Error&) {
          info.dtype = DType::kUndefined;  // reported when a value of that type is used
        }
      }
      if (tt.has_shape()) {
        info.rank_known = true;
        for (const auto& d : tt.shape().dim()) {
          info.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
          info.dim_params.push_back(d.has_dim_param() ? d.dim_param() : "");
        }
      }
      break;
    }
    // Sequences and optionals are tensors of element tensors (onyx/dtype.h).
    case onnx::TypeProto::kSequenceType:
      info.category = TypeInfo::Category::kSequence;
      info.dtype = DType::kSequence;
      if (tp.sequence_type().has_elem_type()) info.elem_dtype = type_from_proto(tp.sequence_type().elem_type()).dtype;
      break;
    case onnx::TypeProto::kOptionalType:
      info.category = TypeInfo::Category::kOptional;
      info.dtype = DType::kOptional;
      if (tp.optional_type().has_elem_type()) info.elem_dtype = type_from_proto(tp.optional_type().elem_type()).dtype;
      break;
    case onnx::TypeProto::kMapType:
      info.category = TypeInfo::Category::kMap;
      info.dtype = DType::kMap;
      if (tp.map_type().has_value_type()) info.elem_dtype = type_from_proto(tp.map_type().value_type()).dtype;
      break;
    case onnx::TypeProto::kSparseTensorType: info.category = TypeInfo::Category::kSparse; break;
    default: break;
  }
  return info;
}

class GraphBuilder {
 public:
  GraphBuilder(const Model& model, TensorLoadContext& tctx) : model_(model), tctx_(tctx) {}

  std::shared_ptr<Graph> build(const onnx::GraphProto& gp, bool is_subgraph) {
    auto g = std::make_shared<Graph>();
    g->name = gp.name();
    for (const auto& init : gp.initializer()) {
      int id = g->value_id(init.name());
      ONYX_CHECK(!g->values[id].is_initializer, "initializer '", init.name(), "' is defined twice");
      g->values[id].is_initializer = true;
      g->initializers[id] = with_context(cat("initializer '", init.name(), "'"), [&] {
        return tensor_from_proto(init, tctx_);
      });
      const Tensor& t = g->initializers[id];
      auto& decl = g->values[id].declared;
      decl.category = TypeInfo::Category::kTensor;
      decl.dtype = t.dtype();
      decl.rank_known = true;
      decl.dims = t.shape().dims();
    }
    ONYX_CHECK(gp.sparse_initializer_size() == 0, "sparse initializers are not supported");
    for (const auto& in : gp.input()) {
      int id = g->value_id(in.name());
      g->values[id].is_input = true;
      if (in.has_type()) g->values[id].declared = type_from_proto(in.type());
      g->inputs.push_back(id);
    }
    for (const auto& vi : gp.value_info()) {
      int id = g->value_id(vi.name());
      if (vi.has_type() && !g->values[id].is_initializer) g->values[id].declared = type_from_proto(vi.type());
    }
    for (int n = 0; n < gp.node_size(); ++n) {
      const auto& np = gp.node(n);
      Node node;
      node.name = np.name();
      node.op_type = np.op_type();
      node.domain = normalize_domain(np.domain());
      std::string where = node.describe();
      with_context(where, [&] {
        convert_node(np, node, *g);
        check_node_schema(node);
      });
      int index = static_cast<int>(g->nodes.size());
      for (int out : node.outputs) {
        if (out < 0) continue;
        Value& v = g->values[out];
        ONYX_CHECK(v.producer < 0 && !v.is_input && !v.is_initializer,
                   where, ": output '", v.name, "' is already defined elsewhere in the graph");
        v.producer = index;
      }
      g->nodes.push_back(std::move(node));
    }
    for (const auto& out : gp.output()) {
      int id = g->value_id(out.name());
      if (out.has_type()) g->values[id].declared = type_from_proto(out.type());
      g->outputs.push_back(id);
    }
    // Values with no definition: outer-scope references in a subgraph, errors at the top.
    for (int id = 0; id < static_cast<int>(g->values.size()); ++id) {
      Value& v = g->values[id];
      if (v.producer >= 0 || v.is_input || v.is_initializer) continue;
      if (is_subgraph) {
        v.is_outer = true;
        g->outer_values.push_back(id);
      } else if (is_read(*g, id)) {
        throw Error(cat("value '", v.name, "' is read, but no node, graph input or initializer defines it",
                        reader_hint(*g, id)));
      }
    }
    topo_sort(*g);
    // Gradient nodes become the ops that compute them (model/expand_gradient.h).
    const auto onnx = model_.opsets.find("");
    if (expand_gradients(*g, onnx == model_.opsets.end() ? 1 : onnx->second)) topo_sort(*g);
    return g;
  }

 private:
  void convert_node(const onnx::NodeProto& np, Node& node, Graph& g) {
    auto it = model_.opsets.find(node.domain);
    ONYX_CHECK(it != model_.opsets.end(), "domain '", node.domain, "' is not imported by the model");
    node.opset = it->second;
    for (const auto& name : np.input()) node.inputs.push_back(name.empty() ? -1 : g.value_id(name));
    for (const auto& name : np.output()) node.outputs.push_back(name.empty() ? -1 : g.value_id(name));
    for (const auto& ap : np.attribute()) {
      with_context(cat("attribute '", ap.name(), "'"), [&] { node.attributes.push_back(convert_attribute(ap, node, g)); });
    }
  }

  Attribute convert_attribute(const onnx::AttributeProto& ap, Node& node, Graph& g) {
    Attribute a;
    a.name = ap.name();
    ONYX_CHECK(ap.ref_attr_name().empty(), "attribute references (function bodies) are not supported");
    using K = Attribute::Kind;
    switch (ap.type()) {
      case onnx::AttributeProto::FLOAT: a.kind = K::kFloat; a.f = ap.f(); break;
      case onnx::AttributeProto::INT: a.kind = K::kInt; a.i = ap.i(); break;
      case onnx::AttributeProto::STRING: a.kind = K::kString; a.s = ap.s(); break;
      case onnx::AttributeProto::TENSOR: a.kind = K::kTensor; a.t = tensor_from_proto(ap.t(), tctx_); break;
      case onnx::AttributeProto::GRAPH: a.kind = K::kGraph; a.g = subgraph(ap.g(), node, g); break;
      case onnx::AttributeProto::FLOATS: a.kind = K::kFloats; a.floats.assign(ap.floats().begin(), ap.floats().end()); break;
      case onnx::AttributeProto::INTS: a.kind = K::kInts; a.ints.assign(ap.ints().begin(), ap.ints().end()); break;
      case onnx::AttributeProto::STRINGS: a.kind = K::kStrings; a.strings.assign(ap.strings().begin(), ap.strings().end()); break;
      case onnx::AttributeProto::TENSORS:
        a.kind = K::kTensors;
        for (const auto& t : ap.tensors()) a.tensors.push_back(tensor_from_proto(t, tctx_));
        break;
      case onnx::AttributeProto::TYPE_PROTO: a.kind = K::kType; a.type = type_from_proto(ap.tp()); break;
      case onnx::AttributeProto::GRAPHS:
        a.kind = K::kGraphs;
        for (const auto& sg : ap.graphs()) a.graphs.push_back(subgraph(sg, node, g));
        break;
      default: throw Error(cat("attribute type ", static_cast<int>(ap.type()), " is not supported"));
    }
    return a;
  }

  // Builds a subgraph and records the outer values it reads as implicit inputs of its node.
  std::shared_ptr<Graph> subgraph(const onnx::GraphProto& gp, Node& node, Graph& parent) {
    auto sg = with_context(cat("subgraph '", gp.name(), "'"), [&] { return build(gp, true); });
    for (int id : sg->outer_values) {
      int pid = parent.value_id(sg->values[id].name);
      if (std::find(node.implicit_inputs.begin(), node.implicit_inputs.end(), pid) == node.implicit_inputs.end())
        node.implicit_inputs.push_back(pid);
    }
    return sg;
  }

  static bool is_read(const Graph& g, int id) {
    for (const auto& n : g.nodes) {
      for (int in : n.inputs) if (in == id) return true;
      for (int in : n.implicit_inputs) if (in == id) return true;
    }
    for (int out : g.outputs) if (out == id) return true;
    return false;
  }

  static std::string reader_hint(const Graph& g, int id) {
    for (const auto& n : g.nodes)
      for (int in : n.inputs) if (in == id) return cat(" (read by ", n.describe(), ")");
    for (int out : g.outputs) if (out == id) return " (it is a graph output)";
    return "";
  }

  // Kahn's algorithm, stable with respect to file order.
  static void topo_sort(Graph& g) {
    size_t n = g.nodes.size();
    std::vector<int> pending(n, 0);
    std::vector<std::vector<int>> users(n);
    for (size_t i = 0; i < n; ++i) {
      auto deps = g.nodes[i].inputs;
      deps.insert(deps.end(), g.nodes[i].implicit_inputs.begin(), g.nodes[i].implicit_inputs.end());
      std::unordered_set<int> seen;
      for (int v : deps) {
        if (v < 0 || g.values[v].producer < 0 || !seen.insert(g.values[v].producer).second) continue;
        ++pending[i];
        users[g.values[v].producer].push_back(static_cast<int>(i));
      }
    }
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (size_t i = 0; i < n; ++i) if (pending[i] == 0) ready.push(static_cast<int>(i));
    std::vector<int> order;
    while (!ready.empty()) {
      int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (int u : users[i]) if (--pending[u] == 0) ready.push(u);
    }
    if (order.size() != n) {
      for (size_t i = 0; i < n; ++i)
        if (pending[i] > 0) throw Error(cat("the graph has a cycle through ", g.nodes[i].describe()));
    }
    bool sorted = true;
    for (size_t i = 0; i < n; ++i) sorted &= order[i] == static_cast<int>(i);
    if (sorted) return;
    std::vector<Node> nodes;
    std::vector<int> new_index(n);
    for (size_t k = 0; k < n; ++k) {
      new_index[order[k]] = static_cast<int>(k);
      nodes.push_back(std::move(g.nodes[order[k]]));
    }
    g.nodes = std::move(nodes);
    for (auto& v : g.values) if (v.producer >= 0) v.producer = new_index[v.producer];
  }

  const Model& model_;
  TensorLoadContext& tctx_;
};

Model convert(std::shared_ptr<onnx::ModelProto> mp, const std::string& name, const std::string& base_dir) {
  Model model;
  model.path = name;
  model.ir_version = mp->ir_version();
  model.producer = mp->producer_name();
  model.producer_version = mp->producer_version();
  model.domain = mp->domain();
  model.doc_string = mp->doc_string();
  model.model_version = mp->model_version();
  model.graph_name = mp->graph().name();
  model.graph_doc_string = mp->graph().doc_string();
  for (const auto& kv : mp->metadata_props()) model.metadata[kv.key()] = kv.value();
  ONYX_CHECK(mp->has_graph(), "the model has no graph (is this an ONNX model?)");
  // Model-local functions run as their bodies' nodes (model/inline_functions.h).
  inline_functions(*mp);
  for (const auto& op : mp->opset_import()) {
    check_opset_import(normalize_domain(op.domain()), op.version());
    model.opsets[normalize_domain(op.domain())] = static_cast<int>(op.version());
  }
  if (mp->opset_import_size() == 0) model.opsets[""] = 1;  // IR < 3 models predate opset imports
  TensorLoadContext tctx;
  tctx.base_dir = base_dir;
  tctx.proto_owner = mp;
  GraphBuilder builder(model, tctx);
  model.graph = with_context(cat("graph '", mp->graph().name(), "'"), [&] { return builder.build(mp->graph(), false); });
  model.keepalive = mp;
  return model;
}

std::shared_ptr<onnx::ModelProto> parse(const void* data, size_t size) {
  auto mp = std::make_shared<onnx::ModelProto>();
  google::protobuf::io::CodedInputStream in(static_cast<const uint8_t*>(data), static_cast<int>(std::min<size_t>(size, INT_MAX)));
  in.SetTotalBytesLimit(INT_MAX);
  ONYX_CHECK(size <= static_cast<size_t>(INT_MAX), "files over 2 GiB must keep their weights in external data");
  if (!mp->ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    throw Error("not a valid ONNX model: the protobuf message could not be parsed (corrupt or truncated file?)");
  ONYX_CHECK(mp->ir_version() > 0 || mp->has_graph(), "not a valid ONNX model: no IR version and no graph");
  return mp;
}

// The file read through a buffer rather than mapped: the parsed message is the only copy of the
// file's bytes in memory (a mapping's pages would stay resident beside it until the parse ends,
// doubling the load's peak).
std::shared_ptr<onnx::ModelProto> parse_file(const std::string& path) {
  const auto size = std::filesystem::file_size(path);
  ONYX_CHECK(size <= static_cast<uintmax_t>(INT_MAX), "files over 2 GiB must keep their weights in external data");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ONYX_CHECK(fd >= 0, "cannot be opened: ", std::strerror(errno));
  auto mp = std::make_shared<onnx::ModelProto>();
  bool ok = false;
  {
    google::protobuf::io::FileInputStream file(fd, 1 << 20);
    file.SetCloseOnDelete(true);
    google::protobuf::io::CodedInputStream in(&file);
    in.SetTotalBytesLimit(INT_MAX);
    ok = mp->ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
    ONYX_CHECK(file.GetErrno() == 0, "could not be read: ", std::strerror(file.GetErrno()));
  }
  if (!ok)
    throw Error("not a valid ONNX model: the protobuf message could not be parsed (corrupt or truncated file?)");
  ONYX_CHECK(mp->ir_version() > 0 || mp->has_graph(), "not a valid ONNX model: no IR version and no graph");
  return mp;
}

}  // namespace

Model load_model_from_bytes(const void* data, size_t size, const std::string& name, const std::string& base_dir) {
  return with_context(cat("loading '", name, "'"), [&] { return convert(parse(data, size), name, base_dir); });
}

Model load_model(const std::string& path) {
  return with_context(cat("loading '", path, "'"), [&] {
    ONYX_CHECK(std::filesystem::exists(path), "no such file");
    ONYX_CHECK(!std::filesystem::is_directory(path), "is a folder, not an ONNX file");
    std::string base = std::filesystem::path(path).parent_path().string();
    return convert(parse_file(path), path, base.empty() ? "." : base);
  });
}

Tensor load_tensor_proto_file(const std::string& path) {
  return with_context(cat("reading tensor '", path, "'"), [&] {
    auto file = MappedFile::open(path);
    onnx::TensorProto tp;
    ONYX_CHECK(tp.ParseFromArray(file->data(), static_cast<int>(file->size())), "not a valid TensorProto");
    TensorLoadContext ctx;
    ctx.base_dir = std::filesystem::path(path).parent_path().string();
    return tensor_from_proto(tp, ctx);
  });
}

namespace {

// SequenceProto and OptionalProto live in onnx-data.proto, which the ONNX schema onyx compiles
// (Debian's, ONNX 1.12) lacks: read by field number. Both: 2 elem_type (0 undefined, 1 tensor,
// 3 sequence, 5 optional). Sequence: 3 tensor_values, 4 sequence_values, 6 optional_values.
// Optional: 3 tensor_value, 5 sequence_value, 7 optional_value.
struct ValueMessage {
  int64_t elem_type = 0;
  std::vector<std::pair<int, std::string>> parts;  // (field, message bytes)
};

ValueMessage parse_value_message(const std::string& bytes, const char* what) {
  using google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  ValueMessage m;
  while (uint32_t tag = in.ReadTag()) {
    const int field = static_cast<int>(tag >> 3);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    if (field == 2 && wire == WireFormatLite::WIRETYPE_VARINT) {
      uint64_t v = 0;
      ONYX_CHECK(in.ReadVarint64(&v), "not a valid ", what, ": truncated elem_type");
      m.elem_type = static_cast<int64_t>(v);
    } else if (wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED && field >= 3) {
      uint32_t len = 0;
      std::string part;
      ONYX_CHECK(in.ReadVarint32(&len) && in.ReadString(&part, static_cast<int>(len)), "not a valid ", what,
                 ": truncated field ", field);
      m.parts.emplace_back(field, std::move(part));
    } else {
      ONYX_CHECK(WireFormatLite::SkipField(&in, tag), "not a valid ", what);
    }
  }
  ONYX_CHECK(in.ConsumedEntireMessage(), "not a valid ", what);
  return m;
}

Tensor tensor_from_bytes(const std::string& bytes, TensorLoadContext& ctx) {
  onnx::TensorProto tp;
  ONYX_CHECK(tp.ParseFromString(bytes), "not a valid TensorProto");
  return tensor_from_proto(tp, ctx);
}

Tensor value_from_bytes(const std::string& bytes, DType kind, TensorLoadContext& ctx, int depth = 0) {
  ONYX_CHECK(depth < 64, "sequences and optionals nest more than 64 deep");
  const bool sequence = kind == DType::kSequence;
  const ValueMessage m = parse_value_message(bytes, sequence ? "SequenceProto" : "OptionalProto");
  const int tensor_field = 3, sequence_field = sequence ? 4 : 5, optional_field = sequence ? 6 : 7;
  DType elem = DType::kUndefined;
  std::vector<Tensor> parts;
  for (const auto& [field, part] : m.parts) {
    if (field == tensor_field) parts.push_back(tensor_from_bytes(part, ctx));
    else if (field == sequence_field) parts.push_back(value_from_bytes(part, DType::kSequence, ctx, depth + 1));
    else if (field == optional_field) parts.push_back(value_from_bytes(part, DType::kOptional, ctx, depth + 1));
    else throw Error(cat("field ", field, " (maps or sparse tensors) is not supported"));
  }
  if (m.elem_type == 3) elem = DType::kSequence;
  if (m.elem_type == 5) elem = DType::kOptional;
  ONYX_CHECK(m.elem_type <= 1 || m.elem_type == 3 || m.elem_type == 5, "element kind ", m.elem_type,
             " (maps or sparse tensors) is not supported");
  if (sequence) return Tensor::sequence(parts, elem);
  ONYX_CHECK(parts.size() <= 1, "an OptionalProto holds ", parts.size(), " values");
  return Tensor::optional(parts.empty() ? Tensor() : parts[0], elem);
}

}  // namespace

Tensor load_value_proto_file(const std::string& path, DType kind) {
  if (kind != DType::kSequence && kind != DType::kOptional) return load_tensor_proto_file(path);
  return with_context(cat("reading ", dtype_name(kind), " '", path, "'"), [&] {
    auto file = MappedFile::open(path);
    TensorLoadContext ctx;
    ctx.base_dir = std::filesystem::path(path).parent_path().string();
    return value_from_bytes(std::string(file->data(), file->size()), kind, ctx);
  });
}

}  // namespace onyx
