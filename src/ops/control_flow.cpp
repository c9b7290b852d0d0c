// Ops with subgraphs: If, Loop, Scan. Their bodies run through the executor
// (KernelContext::run_subgraph), so releasing and error context work the same inside.
#include "ops/common.h"

namespace onyx {

namespace {

// Declared output types of a branch; shapes stay unknown until it runs.
void infer_from_branch(InferContext& ctx, const Graph* g) {
  ONYX_CHECK(g, "missing subgraph attribute");
  for (size_t o = 0; o < ctx.num_outputs() && o < g->outputs.size(); ++o)
    ctx.set_output(o, g->values[g->outputs[o]].declared.dtype, PartialShape());
}

void if_kernel(KernelContext& ctx) {
  const Tensor& cond = ctx.input(0);
  ONYX_CHECK(cond.numel() == 1, "the condition must hold one element, got ", cond.type_str());
  bool take_then = cond.get_as_double(0) != 0;
  const Graph* branch = ctx.attr_graph(take_then ? "then_branch" : "else_branch");
  ONYX_CHECK(branch, "missing attribute ", take_then ? "then_branch" : "else_branch");
  std::vector<Tensor> outs = with_context(take_then ? "then_branch" : "else_branch",
                                          [&] { return ctx.run_subgraph(*branch, {}); });
  ONYX_CHECK(outs.size() == ctx.num_outputs(), "the branch returns ", outs.size(), " values, the node has ",
             ctx.num_outputs(), " outputs");
  for (size_t o = 0; o < outs.size(); ++o) ctx.set_output(o, std::move(outs[o]));
}

}  // namespace

void register_control_flow_ops(OpRegistry& r) {
  r.add(OpDef{"", "If", 1, [](InferContext& ctx) { infer_from_branch(ctx, ctx.attr_graph("then_branch")); },
              if_kernel});
}

}  // namespace onyx
