#include "ops/op.h"

#include "onyx/checked.h"

namespace onyx {

const Attribute* NodeView::typed(std::string_view name, Attribute::Kind kind) const {
  const Attribute* a = node_.find_attribute(name);
  if (!a) return nullptr;
  ONYX_CHECK(a->kind == kind, "attribute '", name, "' is of type ", attribute_kind_name(a->kind), ", expected ",
             attribute_kind_name(kind));
  return a;
}

int64_t NodeView::attr_int(std::string_view name) const {
  const Attribute* a = typed(name, Attribute::Kind::kInt);
  ONYX_CHECK(a, "required attribute '", name, "' is missing");
  return a->i;
}

int64_t NodeView::attr_int(std::string_view name, int64_t fallback) const {
  const Attribute* a = typed(name, Attribute::Kind::kInt);
  return a ? a->i : fallback;
}

float NodeView::attr_float(std::string_view name, float fallback) const {
  const Attribute* a = typed(name, Attribute::Kind::kFloat);
  return a ? a->f : fallback;
}

std::string NodeView::attr_string(std::string_view name, std::string fallback) const {
  const Attribute* a = typed(name, Attribute::Kind::kString);
  return a ? a->s : fallback;
}

std::vector<int64_t> NodeView::attr_ints(std::string_view name, std::vector<int64_t> fallback) const {
  const Attribute* a = typed(name, Attribute::Kind::kInts);
  return a ? a->ints : fallback;
}

std::vector<float> NodeView::attr_floats(std::string_view name, std::vector<float> fallback) const {
  const Attribute* a = typed(name, Attribute::Kind::kFloats);
  return a ? a->floats : fallback;
}

std::vector<std::string> NodeView::attr_strings(std::string_view name) const {
  const Attribute* a = typed(name, Attribute::Kind::kStrings);
  return a ? a->strings : std::vector<std::string>{};
}

const Tensor* NodeView::attr_tensor(std::string_view name) const {
  const Attribute* a = typed(name, Attribute::Kind::kTensor);
  return a ? &a->t : nullptr;
}

const Graph* NodeView::attr_graph(std::string_view name) const {
  const Attribute* a = typed(name, Attribute::Kind::kGraph);
  return a ? a->g.get() : nullptr;
}

OpDef onnx_op(std::string name, int since, InferFn infer, KernelFn kernel) {
  return domain_op("", std::move(name), since, std::move(infer), std::move(kernel));
}

OpDef domain_op(std::string domain, std::string name, int since, InferFn infer, KernelFn kernel) {
  OpDef d;
  d.domain = std::move(domain);
  d.name = std::move(name);
  d.since_version = since;
  d.infer = std::move(infer);
  d.kernel = std::move(kernel);
  return d;
}

InferContext::InferContext(const Node& node, std::vector<ValueType> inputs, std::vector<const Tensor*> values)
    : NodeView(node), inputs_(std::move(inputs)), values_(std::move(values)), outputs_(node.outputs.size()) {}

DType InferContext::input_dtype(size_t i) const {
  ONYX_CHECK(has_input(i), "input ", i, " is required but missing");
  return inputs_[i].dtype;
}

const PartialShape& InferContext::input_shape(size_t i) const {
  ONYX_CHECK(has_input(i), "input ", i, " is required but missing");
  return inputs_[i].shape;
}

const Tensor* InferContext::input_value(size_t i) const { return has_input(i) ? values_[i] : nullptr; }

Shape InferContext::input_concrete_shape(size_t i) const {
  const PartialShape& s = input_shape(i);
  ONYX_CHECK(s.fully_known(), "input ", i, " has a shape that is not known yet (", s.str(), ")");
  return s.to_shape();
}

void InferContext::set_output(size_t i, DType dtype, PartialShape shape) {
  ONYX_ASSERT(i < outputs_.size(), "output ", i, " of ", node().describe());
  // Whatever an op computed its shape from, the shape must describe a tensor that can exist:
  // dims >= 0 and an element count and byte size that fit (the known dims, when some are not).
  if (shape.rank_known) {
    std::vector<int64_t> known;
    for (int64_t d : shape.dims) {
      ONYX_CHECK(d >= 0 || d == PartialShape::kUnknown, "output ", i, " would have a negative dimension ", d,
                 " (shape ", shape.str(), ")");
      if (d >= 0) known.push_back(d);
    }
    with_lazy_context([&] { return cat("output ", i, " of shape ", shape.str()); },
                      [&] { checked_bytes(checked_product(known), dtype, "its byte size"); });
  }
  outputs_[i] = ValueType{dtype, std::move(shape)};
}

const Tensor& KernelContext::input(size_t i) const {
  ONYX_CHECK(i < inputs_.size() && inputs_[i], "input ", i, " is required but missing");
  return *inputs_[i];
}

Tensor& KernelContext::output(size_t i) {
  ONYX_ASSERT(i < outputs_.size() && outputs_[i].defined(), "output ", i, " was not allocated");
  return outputs_[i];
}

Tensor& KernelContext::allocate_output(size_t i, DType dtype, Shape shape) {
  ONYX_ASSERT(i < outputs_.size(), "output ", i, " of ", node().describe());
  outputs_[i] = allocating([&] { return cat("output ", i); }, [&] { return Tensor(dtype, std::move(shape), alloc_); });
  return outputs_[i];
}

void KernelContext::set_output(size_t i, Tensor t) {
  ONYX_ASSERT(i < outputs_.size(), "output ", i, " of ", node().describe());
  outputs_[i] = std::move(t);
}

std::vector<Tensor> KernelContext::run_subgraph(const Graph& graph, const std::vector<Tensor>& inputs) const {
  ONYX_ASSERT(subgraphs_, "no subgraph runner for ", node().describe());
  return (*subgraphs_)(graph, inputs);
}

}  // namespace onyx
