#include "plan/planner.h"

#include <algorithm>
#include <set>

#include "ops/compute.h"
#include "ops/value_inputs.h"

namespace onyx {

std::string_view value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kExternal: return "external";
    case ValueKind::kConstant: return "constant";
    case ValueKind::kArena: return "arena";
    case ValueKind::kOutput: return "output";
    case ValueKind::kDynamic: return "dynamic";
    case ValueKind::kAbsent: return "absent";
  }
  return "?";
}

std::vector<Tensor> evaluate_node(const Node& node, const std::vector<const Tensor*>& inputs) {
  for (const auto& a : node.attributes)
    ONYX_CHECK(!a.g && a.graphs.empty(), "nodes with subgraphs need the executor to be evaluated while planning");
  return compute_node(node, inputs, cpu_allocator());
}

namespace {

// Ops whose onyx CPU kernels read each element before writing the element at the
// same index, so the output may take the storage of the named input when that
// input dies here and has the output's size.
std::vector<int> in_place_inputs(const Node& n) {
  static const std::set<std::string> kUnary = {
      "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Erf", "Reciprocal", "LeakyRelu", "Elu",
      "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Sin", "Cos", "Floor", "Ceil", "Round",
      "Sign", "Gelu", "Mish", "ThresholdedRelu", "Softmax", "LogSoftmax", "LayerNormalization",
      "SimplifiedLayerNormalization", "RMSNormalization"};
  static const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Pow", "PRelu"};
  if (!n.domain.empty()) return {};
  if (kUnary.count(n.op_type)) return {0};
  if (kBinary.count(n.op_type)) return {0, 1};
  return {};
}

bool never_fold(const Node& n) {
  static const std::set<std::string> kRandom = {"RandomNormal", "RandomUniform", "RandomNormalLike",
                                                "RandomUniformLike", "Bernoulli", "Multinomial"};
  return kRandom.count(n.op_type) > 0;
}

size_t value_bytes(const ValueType& t) {
  if (!t.shape.fully_known()) return 0;
  return static_cast<size_t>(t.shape.to_shape().numel()) * dtype_size(t.dtype);
}

}  // namespace

ExecutionPlan plan_graph(const Graph& g, const std::vector<ValueType>& inputs, const PlanOptions& options,
                         const NodeEvaluator& evaluate) {
  ExecutionPlan p(g);
  const size_t nv = g.values.size();
  const int ns = static_cast<int>(g.nodes.size());
  p.values.assign(nv, ValuePlan{});
  p.constants.assign(nv, Tensor());
  p.skip.assign(ns, false);
  p.place.assign(ns, StepPlace::kHost);
  for (int s = 0; s < ns; ++s) p.schedule.push_back(s);
  ONYX_CHECK(inputs.size() == g.inputs.size(), "the plan needs ", g.inputs.size(), " input types, got ", inputs.size());

  // Values present before the first step.
  for (const auto& [id, t] : g.initializers) {
    p.values[id].type = ValueType{t.dtype(), t.shape()};
    p.values[id].kind = ValueKind::kExternal;
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    int id = g.inputs[i];
    ONYX_CHECK(inputs[i].shape.fully_known(), "input '", g.values[id].name, "' needs a fully known shape to plan, got ",
               inputs[i].shape.str());
    p.values[id].type = inputs[i];
    p.values[id].kind = ValueKind::kExternal;
    p.constants[id] = Tensor();  // a fed input overrides any initializer default
  }
  for (int id : g.outer_values) p.values[id].kind = ValueKind::kExternal;
  // Values known while planning: folded results and initializers that no feed can replace.
  auto known_value = [&](int id) -> const Tensor* {
    if (p.constants[id].defined()) return &p.constants[id];
    auto it = g.initializers.find(id);
    return it != g.initializers.end() && !g.values[id].is_input ? &it->second : nullptr;
  };

  // 1. Shape propagation, with shape arithmetic evaluated on the CPU.
  for (int s = 0; s < ns; ++s) {
    const Node& n = g.nodes[s];
    with_context(cat("planning ", n.describe()), [&] {
      std::vector<ValueType> types(n.inputs.size());
      std::vector<const Tensor*> values(n.inputs.size(), nullptr);
      bool shapes_known = true, values_known = true;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        int id = n.inputs[i];
        if (id < 0) continue;
        types[i] = p.values[id].type;
        values[i] = known_value(id);
        shapes_known &= types[i].shape.fully_known();
        values_known &= values[i] != nullptr;
      }
      for (int id : n.implicit_inputs) values_known &= known_value(id) != nullptr;
      for (int out : n.outputs)
        if (out >= 0) p.values[out].first = s;

      auto mark_dynamic = [&](const std::string& reason, bool boundary) {
        for (int out : n.outputs)
          if (out >= 0) p.values[out].kind = ValueKind::kDynamic;
        if (boundary) p.dynamic_boundaries.push_back({s, n.describe(), reason});
      };
      if (!shapes_known) {
        p.place[s] = StepPlace::kRunTime;
        mark_dynamic("", false);  // inside a dynamic region: shapes come at run time
        for (size_t o = 0; o < n.outputs.size(); ++o)
          if (n.outputs[o] >= 0) p.values[n.outputs[o]].type.shape = PartialShape();
        return;
      }
      // Shape and Size read only their input's shape: their values are known now.
      if ((n.op_type == "Shape" || n.op_type == "Size") && n.domain.empty()) {
        ONYX_CHECK(!n.inputs.empty() && n.inputs[0] >= 0, n.op_type, " needs its input");
        ONYX_CHECK(!n.outputs.empty() && n.outputs[0] >= 0, n.op_type, " needs its output");
        Tensor dummy = Tensor::borrow(types[0].dtype, types[0].shape.to_shape(), nullptr);
        std::vector<const Tensor*> in{&dummy};
        auto outs = compute_node(n, in, cpu_allocator());
        p.constants[n.outputs[0]] = outs[0];
        p.values[n.outputs[0]].type = ValueType{outs[0].dtype(), outs[0].shape()};
        p.values[n.outputs[0]].kind = ValueKind::kConstant;
        p.skip[s] = true;
        ++p.folded_nodes;
        return;
      }
      InferContext ictx(n, types, values);
      try {
        n.def->infer(ictx);
      } catch (const Error& e) {
        if (values_known) throw;
        mark_dynamic(cat("its output shape depends on data computed at run time (", e.what(), ")"), true);
        return;
      }
      bool outputs_known = true;
      size_t out_bytes = 0;
      for (size_t o = 0; o < n.outputs.size(); ++o) {
        int out = n.outputs[o];
        if (out < 0) continue;
        p.values[out].type = ictx.outputs()[o];
        outputs_known &= p.values[out].type.shape.fully_known();
        out_bytes += value_bytes(p.values[out].type);
      }
      // Fold: compute now what every run would compute alike (shape arithmetic, constant
      // subgraphs, a loop-invariant If), when it is small. Served from the plan afterwards.
      if (values_known && !never_fold(n) && (!outputs_known || out_bytes <= options.fold_limit_bytes)) {
        std::vector<Tensor> outs;
        try {
          outs = evaluate(n, values);
        } catch (const Error&) {
          if (n.implicit_inputs.empty() && outputs_known) throw;  // a plain op failing on known data is a real error
        }
        size_t folded_bytes = 0;
        for (const auto& t : outs) folded_bytes += t.defined() ? t.bytes() : 0;
        if (!outs.empty() && folded_bytes <= options.fold_limit_bytes) {
          for (size_t o = 0; o < n.outputs.size(); ++o) {
            if (n.outputs[o] < 0) continue;
            p.constants[n.outputs[o]] = outs[o].clone();  // owned by the plan, not borrowed from an input
            p.values[n.outputs[o]].type = ValueType{outs[o].dtype(), outs[o].shape()};
            p.values[n.outputs[o]].kind = ValueKind::kConstant;
          }
          p.skip[s] = true;
          ++p.folded_nodes;
          return;
        }
      }
      bool is_view = !n.def->views.empty() && n.def->views.size() == n.outputs.size();
      if (is_view || reads_only_metadata(n)) p.place[s] = StepPlace::kNone;
      else if (!outputs_known) p.place[s] = StepPlace::kRunTime;
      else if (options.on_accel && options.on_accel(n, types)) p.place[s] = StepPlace::kAccel;
      if (!outputs_known)
        mark_dynamic(n.implicit_inputs.empty() ? "its output shape depends on the values of its inputs"
                                               : "its outputs come from a subgraph, known only when it runs",
                     true);
    });
  }

  // 2. Lifetimes.
  for (int s = 0; s < ns; ++s) {
    const Node& n = g.nodes[s];
    if (p.skip[s]) continue;
    for (int id : n.inputs)
      if (id >= 0) p.values[id].last = s;
    for (int id : n.implicit_inputs) p.values[id].last = s;
  }
  for (size_t id = 0; id < nv; ++id) {
    ValuePlan& v = p.values[id];
    v.root = static_cast<int>(id);
    v.bytes = value_bytes(v.type);
    if (v.first >= 0 && v.kind == ValueKind::kAbsent) v.kind = ValueKind::kArena;
    if (v.first >= 0 && v.last < v.first) v.last = v.first;  // produced, never read
    if (v.kind == ValueKind::kConstant) p.guards.add(static_cast<int>(id), GuardReason::kMemoized);
  }

  for (int s = 0; s < ns; ++s)
    if (p.place[s] == StepPlace::kAccel) {
      p.uses_accel = true;
      for (int out : g.nodes[s].outputs)
        if (out >= 0) p.values[out].on_accel = true;
    }

  // 3. Aliases (views) and in-place reuse, in schedule order. A root's group is
  // every value sharing its storage; the group lives from its first to its last member.
  std::vector<int> group_last(nv), group_first(nv);
  for (size_t id = 0; id < nv; ++id) {
    group_last[id] = p.values[id].last;
    group_first[id] = p.values[id].first;
  }
  // Whether a group holds a graph output: then it is handed to the caller, and no
  // in-place write may land in it.
  std::vector<bool> group_has_output(nv, false);
  for (int id : g.outputs) group_has_output[id] = true;
  auto join = [&](int out, int root) {
    p.values[out].root = root;
    p.values[out].on_accel = p.values[root].on_accel;
    group_last[root] = std::max(group_last[root], p.values[out].last);
    if (group_has_output[out]) group_has_output[root] = true;
  };
  for (int s = 0; s < ns; ++s) {
    if (p.skip[s]) continue;
    const Node& n = g.nodes[s];
    for (auto [o, i] : n.def->views) {
      if (o >= static_cast<int>(n.outputs.size()) || i >= static_cast<int>(n.inputs.size())) continue;
      int out = n.outputs[o], in = n.inputs[i];
      if (out < 0 || in < 0) continue;
      join(out, p.values[in].root);
    }
    if (!options.in_place) continue;
    for (size_t o = 0; o < n.outputs.size() && o < 1; ++o) {
      int out = n.outputs[o];
      if (out < 0 || p.values[out].kind != ValueKind::kArena || p.values[out].root != out || p.guards.guarded(out))
        continue;
      for (int i : in_place_inputs(n)) {
        if (i >= static_cast<int>(n.inputs.size()) || n.inputs[i] < 0) continue;
        int root = p.values[n.inputs[i]].root;
        const ValuePlan& r = p.values[root];
        if (r.kind != ValueKind::kArena || p.guards.guarded(root) || group_last[root] != s) continue;
        if (group_has_output[root]) continue;
        if (r.on_accel != p.values[out].on_accel) continue;  // storage stays on its device
        if (r.bytes != p.values[out].bytes || r.bytes == 0) continue;
        join(out, root);
        p.values[out].in_place = true;
        ++p.in_place_count;
        break;
      }
    }
  }
  // A group holding a graph output is handed to the caller; one holding a dynamic
  // or external value is not the arena's.
  std::vector<ValueKind> group_kind(nv, ValueKind::kArena);
  for (size_t id = 0; id < nv; ++id) group_kind[id] = p.values[id].kind;
  for (int id : g.outputs) {
    int root = p.values[id].root;
    if (group_kind[root] == ValueKind::kArena) group_kind[root] = ValueKind::kOutput;
  }
  for (size_t id = 0; id < nv; ++id) {
    ValuePlan& v = p.values[id];
    if (v.kind == ValueKind::kArena || v.kind == ValueKind::kOutput) v.kind = group_kind[v.root];
  }
  for (int id : g.outputs) p.guards.add(id, GuardReason::kGraphOutput);

  // 4. Placement of arena groups, one arena per device.
  for (bool accel : {false, true}) {
    std::vector<int> roots;
    std::vector<BufferLife> lives;
    size_t alignment = accel ? options.accel_alignment : options.alignment;
    for (size_t id = 0; id < nv; ++id) {
      const ValuePlan& v = p.values[id];
      if (v.root != static_cast<int>(id) || v.kind != ValueKind::kArena || v.bytes == 0 || v.on_accel != accel) continue;
      roots.push_back(static_cast<int>(id));
      lives.push_back({group_first[id], std::max(group_last[id], group_first[id]), align_up(v.bytes, alignment)});
    }
    Placement placement = place_best(lives);
    ArenaPlan& a = accel ? p.accel_arena : p.host_arena;
    a.bytes = placement.arena_bytes;
    a.algorithm = placement.algorithm;
    a.alignment = alignment;
    a.lower_bound_bytes = lower_bound_bytes(lives, &a.peak_step);
    for (const auto& l : lives) a.no_reuse_bytes += l.bytes;
    for (size_t k = 0; k < roots.size(); ++k) p.values[roots[k]].offset = placement.offsets[k];
    std::string bad = verify_placement(lives, placement);
    ONYX_ASSERT(bad.empty(), "placement check failed: ", bad);
  }
  for (size_t id = 0; id < nv; ++id)
    if (p.values[id].kind == ValueKind::kArena) p.values[id].offset = p.values[p.values[id].root].offset;

  // 5. Release after the last reader: everything unguarded, arena values included
  // (dropping them costs nothing; dynamic ones go back to the allocator).
  p.release_after.assign(ns, {});
  for (size_t id = 0; id < nv; ++id) {
    const ValuePlan& v = p.values[id];
    if (p.guards.guarded(static_cast<int>(id)) || v.first < 0) continue;
    int step = std::max(v.last, v.first);
    if (step >= 0 && step < ns) p.release_after[step].push_back(static_cast<int>(id));
  }
  return p;
}

}  // namespace onyx
