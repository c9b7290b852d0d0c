// Phases 1 and 2 of plan_graph: the values present before the first node, then shape
// propagation, with the shape arithmetic of exported models evaluated now.
#include "model/onnx_schema.h"
#include "onyx/checked.h"
#include "ops/compute.h"
#include "plan/planning.h"

namespace onyx::planning {

size_t value_bytes(const ValueType& t) {
  if (!t.shape.fully_known()) return 0;
  return checked_bytes_lazy(t.shape.to_shape().numel(), t.dtype,
                            [&] { return cat("a value of ", dtype_name(t.dtype), t.shape.str()); });
}

bool has_subgraphs(const Node& n) {
  for (const auto& a : n.attributes)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

namespace {

// Computes a node whose inputs are all known, now (shape arithmetic, constant subgraphs,
// a loop-invariant If); empty when it cannot be or its result is too large to keep.
std::vector<Tensor> evaluate(const Planning& P, const Node& n, const std::vector<const Tensor*>& values,
                             bool outputs_known) {
  const bool subgraphs = has_subgraphs(n);
  if (subgraphs && !P.options.evaluate_subgraph) return {};
  std::vector<Tensor> outs;
  // Under a budget of what may be kept (and some scratch): a node asking for more is
  // refused before its memory is taken, and runs at run time, under the session's budget.
  auto alloc = make_cpu_allocator();
  alloc->set_budget(P.options.fold_limit_bytes + (size_t{64} << 20));
  try {
    outs = compute_node(n, values, *alloc, subgraphs ? &P.options.evaluate_subgraph : nullptr);
  } catch (const HostBudgetExceeded&) {
    return {};
  } catch (const Error&) {
    if (n.implicit_inputs.empty() && outputs_known) throw;  // a plain op failing on known data is a real error
    return {};
  }
  size_t bytes = 0;
  for (const auto& t : outs) bytes = checked_add_bytes(bytes, t.defined() ? t.bytes() : 0, "the node's outputs");
  return bytes <= P.options.fold_limit_bytes ? outs : std::vector<Tensor>{};
}

// Shape propagation of one node, with shape arithmetic evaluated on the CPU and small
// results computed now (folded): served from the plan on every run.
void propagate_node(Planning& P, int s) {
  ExecutionPlan& p = P.p;
  const Node& n = P.g.nodes[s];
  const OpDef& def = *n.def;
  std::vector<ValueType>& types = P.node_inputs[s];
  types.assign(n.inputs.size(), ValueType{});
  std::vector<const Tensor*> values(n.inputs.size(), nullptr);
  bool shapes_known = true, values_known = true;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    int id = n.inputs[i];
    if (id < 0) continue;
    types[i] = p.values[id].type;
    values[i] = P.known_value(id);
    shapes_known &= types[i].shape.fully_known();
    values_known &= values[i] != nullptr;
  }
  for (int id : n.implicit_inputs) values_known &= P.known_value(id) != nullptr;
  for (int out : n.outputs)
    if (out >= 0) p.values[out].first = s;
  auto mark_dynamic = [&](const std::string& reason) {
    P.dynamic[s] = true;
    for (int out : n.outputs)
      if (out >= 0) p.values[out].kind = ValueKind::kDynamic;
    if (!reason.empty()) p.dynamic_boundaries.push_back({s, n.describe(), reason});
  };
  auto fold = [&](const std::vector<Tensor>& outs) {
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      if (n.outputs[o] < 0) continue;
      p.constants[n.outputs[o]] = outs[o].clone();  // owned by the plan, not borrowed from an input
      p.values[n.outputs[o]].type = ValueType{outs[o].dtype(), outs[o].shape()};
      p.values[n.outputs[o]].kind = ValueKind::kConstant;
      check_declared_dtype(P.g, n.outputs[o], outs[o].dtype());
    }
    p.folded[s] = true;
    ++p.folded_nodes;
  };
  if (!shapes_known) {
    mark_dynamic("");  // inside a dynamic region: shapes come at run time
    for (int out : n.outputs)
      if (out >= 0) p.values[out].type.shape = PartialShape();
    return;
  }
  // Shape and Size read only their input's shape: their values are known now.
  if (def.metadata_only) {
    ONYX_CHECK(!n.inputs.empty() && n.inputs[0] >= 0, n.op_type, " needs its input");
    Tensor dummy = Tensor::borrow(types[0].dtype, types[0].shape.to_shape(), nullptr);
    std::vector<const Tensor*> in{&dummy};
    fold(compute_node(n, in, cpu_allocator()));
    return;
  }
  InferContext ictx(n, types, values);
  try {
    def.infer(ictx);
  } catch (const Error& e) {
    if (values_known) throw;
    mark_dynamic(cat("its output shape depends on data computed at run time (", e.what(), ")"));
    return;
  }
  bool outputs_known = true;
  size_t out_bytes = 0;
  for (size_t o = 0; o < n.outputs.size(); ++o) {
    int out = n.outputs[o];
    if (out < 0) continue;
    p.values[out].type = ictx.outputs()[o];
    check_declared_dtype(P.g, out, p.values[out].type.dtype);
    outputs_known &= p.values[out].type.shape.fully_known();
    out_bytes = checked_add_bytes(out_bytes, value_bytes(p.values[out].type), "the node's outputs");
  }
  if (values_known && def.foldable && (!outputs_known || out_bytes <= P.options.fold_limit_bytes)) {
    std::vector<Tensor> outs = evaluate(P, n, values, outputs_known);
    if (!outs.empty()) {
      fold(outs);
      return;
    }
  }
  if (!outputs_known)
    mark_dynamic(n.implicit_inputs.empty() ? "its output shape depends on the values of its inputs"
                                           : "its outputs come from a subgraph, known only when it runs");
}

}  // namespace

// Values present before the first node: initializers, fed inputs, outer-scope values.
void start_values(Planning& P) {
  ExecutionPlan& p = P.p;
  const Graph& g = P.g;
  const PlanRequest& r = P.request;
  p.values.assign(P.nv(), ValuePlan{});
  p.constants.assign(P.nv(), Tensor());
  p.folded.assign(P.nn(), false);
  p.arena = P.options.arena;
  ONYX_CHECK(r.inputs.size() == g.inputs.size(), "the plan needs ", g.inputs.size(), " input types, got ",
             r.inputs.size());
  for (const auto& [id, t] : g.initializers) {
    p.values[id].type = ValueType{t.dtype(), t.shape()};
    p.values[id].kind = ValueKind::kExternal;
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int id = g.inputs[i];
    ONYX_CHECK(r.inputs[i].shape.fully_known(), "input '", g.values[id].name, "' needs a fully known shape to plan, got ",
               r.inputs[i].shape.str());
    p.values[id].type = r.inputs[i];
    p.values[id].kind = ValueKind::kExternal;
    p.values[id].on_accel = i < r.inputs_on_accel.size() && r.inputs_on_accel[i];
  }
  for (size_t k = 0; k < g.outer_values.size(); ++k) {
    int id = g.outer_values[k];
    p.values[id].kind = ValueKind::kExternal;
    if (k < r.outer.size()) p.values[id].type = r.outer[k];
  }
}

void propagate_shapes(Planning& P) {
  P.node_inputs.assign(P.nn(), {});
  P.dynamic.assign(P.nn(), false);
  for (int s = 0; s < P.nn(); ++s)
    with_lazy_context([&] { return cat("planning ", P.g.nodes[s].describe()); }, [&] { propagate_node(P, s); });
}

}  // namespace onyx::planning
