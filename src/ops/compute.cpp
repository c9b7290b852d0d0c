#include "ops/compute.h"

namespace onyx {

std::vector<Tensor> compute_node(const Node& node, const std::vector<const Tensor*>& inputs, Allocator& alloc,
                                 const SubgraphRunner* subgraphs, const OutputBinder* bind,
                                 const std::vector<const Tensor*>* infer_values, const KernelFn* kernel) {
  const OpDef& def = *node.def;
  std::vector<ValueType> types(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i]) types[i] = ValueType{inputs[i]->dtype(), inputs[i]->shape()};
  InferContext ictx(node, types, infer_values ? *infer_values : inputs);
  def.infer(ictx);

  std::vector<Tensor> outputs(node.outputs.size());
  bool needs_kernel = false;
  for (size_t o = 0; o < node.outputs.size(); ++o) {
    if (node.outputs[o] < 0) continue;
    const ValueType& vt = ictx.outputs()[o];
    int view_of = -1;
    for (auto [out, in] : def.views)
      if (out == static_cast<int>(o)) view_of = in;
    if (view_of >= 0 && vt.shape.fully_known()) {
      outputs[o] = inputs[view_of]->view(vt.shape.to_shape());
      continue;
    }
    needs_kernel = true;
    if (!vt.shape.fully_known()) continue;
    if (bind) outputs[o] = (*bind)(o, vt);
    if (!outputs[o].defined()) outputs[o] = Tensor(vt.dtype, vt.shape.to_shape(), alloc);
  }
  if (needs_kernel) {
    const KernelFn& run = kernel ? *kernel : def.kernel;
    ONYX_ASSERT(run, "op ", def.name, " has no CPU kernel");
    KernelContext kctx(node, std::span<const Tensor* const>(inputs), outputs, alloc, subgraphs);
    run(kctx);
  }
  check_outputs_produced(node, outputs);
  return outputs;
}

void check_outputs_produced(const Node& node, std::span<const Tensor> outputs) {
  for (size_t o = 0; o < node.outputs.size(); ++o)
    ONYX_CHECK(node.outputs[o] < 0 || (o < outputs.size() && outputs[o].defined()), "the node names output ", o,
               ", but its kernel produced no value for it (", node.outputs.size(), " outputs named: more than ",
               node.op_type, " has?)");
}

}  // namespace onyx
