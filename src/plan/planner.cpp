// plan_graph in named phases, run in order over one Planning record (plan/planning.h;
// the first two are in shapes.cpp):
//   start_values -> propagate_shapes -> choose_places -> find_lifetimes ->
//   share_storage -> classify_groups -> place_arenas -> plan_copies ->
//   plan_releases -> find_capture_blocker
#include "plan/planner.h"

#include <algorithm>

#include "plan/planning.h"

namespace onyx {

std::string_view value_kind_name(ValueKind k) {
  switch (k) {
    case ValueKind::kExternal: return "external";
    case ValueKind::kConstant: return "constant";
    case ValueKind::kArena: return "arena";
    case ValueKind::kOutput: return "output";
    case ValueKind::kAllocated: return "allocated";
    case ValueKind::kDynamic: return "dynamic";
    case ValueKind::kAbsent: return "absent";
  }
  return "?";
}

std::string_view step_place_name(StepPlace p) {
  switch (p) {
    case StepPlace::kHost: return "host";
    case StepPlace::kAccel: return "accel";
    case StepPlace::kNone: return "view";
    case StepPlace::kRunTime: return "run-time";
  }
  return "?";
}

std::vector<const Step*> ExecutionPlan::fallbacks() const {
  std::vector<const Step*> out;
  for (const Step& s : steps)
    if (!s.fallback.empty()) out.push_back(&s);
  return out;
}

namespace {

using namespace planning;

// A Transpose whose input's axes of size > 1 keep their order under the permutation (at these
// planned shapes: [B, 1, H, D] -> [B, H, 1, D] at one position): the output's elements are the
// input's, in the same order.
bool order_preserving_transpose(const Node& n, const std::vector<ValueType>& in) {
  if (n.op_type != "Transpose" || !(n.domain.empty() || n.domain == "ai.onnx") || n.outputs.size() != 1 ||
      in.empty() || !in[0].shape.fully_known())
    return false;
  const std::vector<int64_t>& d = in[0].shape.dims;
  std::vector<int64_t> perm;
  if (const Attribute* a = n.find_attribute("perm")) perm = a->ints;
  else
    for (size_t i = d.size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));  // default: reversed
  if (perm.size() != d.size()) return false;
  int64_t last = -1;
  for (int64_t axis : perm) {
    if (axis < 0 || axis >= static_cast<int64_t>(d.size())) return false;
    if (d[axis] == 1) continue;
    if (axis < last) return false;
    last = axis;
  }
  return true;
}

// A Cast or CastLike to the element type its input already has: the output is the input, byte
// for byte (HF's attention casts its float32 softmax back to float32), so it is a view.
bool same_type_cast(const Node& n, const std::vector<ValueType>& in, const ExecutionPlan& p) {
  if ((n.op_type != "Cast" && n.op_type != "CastLike") || !(n.domain.empty() || n.domain == "ai.onnx") ||
      n.outputs.size() != 1 || n.outputs[0] < 0 || in.empty())
    return false;
  const DType from = in[0].dtype;
  return from != DType::kUndefined && from == p.values[n.outputs[0]].type.dtype;
}

// Whether node `n` is the standard op `op` whose one output has its input 0's type and shape, all
// known at these planned shapes.
bool keeps_input_shape(const Node& n, const char* op, const std::vector<ValueType>& in, const ExecutionPlan& p) {
  if (n.op_type != op || !(n.domain.empty() || n.domain == "ai.onnx") || n.outputs.size() != 1 || n.outputs[0] < 0 ||
      in.empty() || !in[0].shape.fully_known())
    return false;
  const ValueType& out = p.values[n.outputs[0]].type;
  return out.shape.fully_known() && out.shape.dims == in[0].shape.dims && out.dtype == in[0].dtype;
}

// An Expand to the shape its input already has (transformers' masks expanded to [batch, 1, new,
// keys] after an And that made that shape), or a Slice with steps of 1 that keeps all of its input
// (Optimum's masks cut at the keys' length, which the static cache makes their whole width): the
// output is the input.
bool identity_expand_or_slice(const Node& n, const std::vector<ValueType>& in, const Planning& P) {
  if (keeps_input_shape(n, "Expand", in, P.p)) return true;
  if (n.opset < 10 || !keeps_input_shape(n, "Slice", in, P.p)) return false;
  if (n.inputs.size() > 4 && n.inputs[4] >= 0) {  // steps: 1 on every axis (-1 would reverse it)
    const Tensor* steps = P.known_value(n.inputs[4]);
    if (!steps) return false;
    for (int64_t step : steps->to_int64_vector())
      if (step != 1) return false;
  }
  return true;
}

// Each node that runs becomes a step with its device and kernel, resolved once.
void choose_places(Planning& P) {
  ExecutionPlan& p = P.p;
  P.step_of_node.assign(P.nn(), -1);
  for (int s = 0; s < P.nn(); ++s) {
    if (p.folded[s]) continue;
    const Node& n = P.g.nodes[s];
    const OpDef& def = *n.def;
    Step st;
    st.node = s;
    st.has_subgraphs = has_subgraphs(n);
    st.views = def.views;
    if (P.dynamic[s]) {
      st.place = StepPlace::kRunTime;
    } else if (def.is_view() && def.views.size() == n.outputs.size()) {
      st.place = StepPlace::kNone;
    } else if (order_preserving_transpose(n, P.node_inputs[s]) || same_type_cast(n, P.node_inputs[s], p) ||
               identity_expand_or_slice(n, P.node_inputs[s], P)) {
      st.place = StepPlace::kNone;
      st.views = {{0, 0}};
    } else {
      std::string why;
      if (P.options.backend) st.kernel = P.options.backend->find_kernel(n, P.node_inputs[s], &why);
      if (st.kernel) {
        st.place = StepPlace::kAccel;
        p.uses_accel = true;
        for (int out : n.outputs)
          if (out >= 0) p.values[out].on_accel = true;
      } else {
        st.place = StepPlace::kHost;
        st.kernel = def.specialize ? def.specialize(n) : def.kernel;
        st.fallback = why;
        ONYX_CHECK(st.kernel, n.describe(), ": op ", def.name, " has no CPU kernel");
      }
    }
    P.step_of_node[s] = static_cast<int>(p.steps.size());
    p.steps.push_back(std::move(st));
  }
}

void find_lifetimes(Planning& P) {
  ExecutionPlan& p = P.p;
  for (const Step& st : p.steps) {
    const Node& n = P.g.nodes[st.node];
    for (int id : n.inputs)
      if (id >= 0) p.values[id].last = st.node;
    for (int id : n.implicit_inputs) p.values[id].last = st.node;
  }
  for (size_t id = 0; id < P.nv(); ++id) {
    ValuePlan& v = p.values[id];
    v.root = static_cast<int>(id);
    v.bytes = value_bytes(v.type);
    if (v.first >= 0 && v.kind == ValueKind::kAbsent) v.kind = ValueKind::kArena;
    if (v.first >= 0 && v.last < v.first) v.last = v.first;  // produced, never read
    if (v.kind == ValueKind::kConstant) p.guards.add(static_cast<int>(id), GuardReason::kMemoized);
  }
}

// Views and in-place reuse, in step order. A root's group is every value sharing its
// storage; the group lives from its first to its last member.
void share_storage(Planning& P) {
  ExecutionPlan& p = P.p;
  const size_t nv = P.nv();
  P.group_first.resize(nv);
  P.group_last.resize(nv);
  P.group_has_output.assign(nv, false);
  for (size_t id = 0; id < nv; ++id) {
    P.group_first[id] = p.values[id].first;
    P.group_last[id] = p.values[id].last;
  }
  // A group that holds a graph output is handed to the caller: no in-place write may land in it.
  for (int id : P.g.outputs) P.group_has_output[id] = true;
  auto join = [&](int out, int root) {
    p.values[out].root = root;
    p.values[out].on_accel = p.values[root].on_accel;
    P.group_last[root] = std::max(P.group_last[root], p.values[out].last);
    if (P.group_has_output[out]) P.group_has_output[root] = true;
  };
  const bool in_place = P.options.in_place && P.options.arena;
  for (const Step& st : p.steps) {
    const Node& n = P.g.nodes[st.node];
    for (auto [o, i] : st.views) {
      if (o >= static_cast<int>(n.outputs.size()) || i >= static_cast<int>(n.inputs.size())) continue;
      int out = n.outputs[o], in = n.inputs[i];
      if (out >= 0 && in >= 0) join(out, p.values[in].root);
    }
    if (!in_place || n.outputs.empty() || (st.place != StepPlace::kHost && st.place != StepPlace::kAccel)) continue;
    int out = n.outputs[0];
    if (out < 0 || p.values[out].kind != ValueKind::kArena || p.values[out].root != out || p.guards.guarded(out))
      continue;
    for (int i : n.def->in_place_inputs) {
      if (i >= static_cast<int>(n.inputs.size()) || n.inputs[i] < 0) continue;
      int root = p.values[n.inputs[i]].root;
      const ValuePlan& r = p.values[root];
      if (r.kind != ValueKind::kArena || p.guards.guarded(root) || P.group_last[root] != st.node) continue;
      if (P.group_has_output[root] || r.on_accel != p.values[out].on_accel) continue;  // storage stays on its device
      if (r.bytes != p.values[out].bytes || r.bytes == 0) continue;
      if (dtype_is_object(r.type.dtype) || dtype_is_object(p.values[out].type.dtype)) continue;  // objects, not bytes
      join(out, root);
      p.values[out].in_place = true;
      ++p.in_place_count;
      break;
    }
  }
}

// A group holding a graph output is handed to the caller; one holding a dynamic or
// external value is not the arena's; without an arena every group is allocated. A
// group holding strings is allocated too: a string is an object that its storage
// constructs and destroys, which raw arena bytes never do.
void classify_groups(Planning& P) {
  ExecutionPlan& p = P.p;
  std::vector<ValueKind> group_kind(P.nv());
  for (size_t id = 0; id < P.nv(); ++id) group_kind[id] = p.values[id].kind;
  for (int id : P.g.outputs) {
    int root = p.values[id].root;
    if (group_kind[root] == ValueKind::kArena) group_kind[root] = ValueKind::kOutput;
  }
  for (size_t id = 0; id < P.nv(); ++id) {
    int root = p.values[id].root;
    if (dtype_is_object(p.values[id].type.dtype) && group_kind[root] == ValueKind::kArena)
      group_kind[root] = ValueKind::kAllocated;
  }
  for (size_t id = 0; id < P.nv(); ++id) {
    ValuePlan& v = p.values[id];
    if (v.kind == ValueKind::kArena || v.kind == ValueKind::kOutput) v.kind = group_kind[v.root];
    if (v.kind == ValueKind::kArena && !P.options.arena) v.kind = ValueKind::kAllocated;
  }
  for (int id : P.g.outputs) p.guards.add(id, GuardReason::kGraphOutput);
}

// One arena per device, every arena group at a fixed offset (L3).
void place_arenas(Planning& P) {
  ExecutionPlan& p = P.p;
  for (bool accel : {false, true}) {
    std::vector<int> roots;
    std::vector<BufferLife> lives;
    size_t alignment = accel ? P.options.accel_alignment : P.options.alignment;
    for (size_t id = 0; id < P.nv(); ++id) {
      const ValuePlan& v = p.values[id];
      if (v.root != static_cast<int>(id) || v.kind != ValueKind::kArena || v.bytes == 0 || v.on_accel != accel) continue;
      roots.push_back(static_cast<int>(id));
      lives.push_back({P.group_first[id], std::max(P.group_last[id], P.group_first[id]), align_up(v.bytes, alignment)});
    }
    // Every offset a placement gives lies below the sum of all sizes: if that fits, no offset wraps.
    size_t total = 0;
    for (size_t k = 0; k < lives.size(); ++k)
      total = with_lazy_context([&] { return cat("placing value '", P.g.values[roots[k]].name, "' in the arena"); },
                                [&] { return checked_add_bytes(total, lives[k].bytes, "the arena"); });
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
  for (size_t id = 0; id < P.nv(); ++id)
    if (p.values[id].kind == ValueKind::kArena) p.values[id].offset = p.values[p.values[id].root].offset;
}

// Where each value is available as the steps run, and the copies that make it
// available where a step needs it: at the first reader on the other device.
void plan_copies(Planning& P) {
  ExecutionPlan& p = P.p;
  const Graph& g = P.g;
  std::vector<char> on_host(P.nv(), 0), on_accel(P.nv(), 0);
  for (const auto& [id, t] : g.initializers) {
    on_host[id] = 1;
    on_accel[id] = static_cast<size_t>(id) < P.request.resident_on_accel.size() && P.request.resident_on_accel[id];
  }
  for (int id : g.inputs) {
    on_host[id] = !p.values[id].on_accel;
    on_accel[id] = p.values[id].on_accel;
  }
  for (int id : g.outer_values) on_host[id] = 1;
  for (size_t id = 0; id < P.nv(); ++id)
    if (p.values[id].kind == ValueKind::kConstant) on_host[id] = 1;
  for (Step& st : p.steps) {
    const Node& n = g.nodes[st.node];
    if (st.place == StepPlace::kHost) {
      auto need = [&](int id) {
        if (id < 0 || on_host[id]) return;
        st.to_host.push_back(id);
        on_host[id] = 1;
      };
      for (int id : n.inputs) need(id);
      for (int id : n.implicit_inputs) need(id);  // subgraphs run on the CPU
    } else if (st.place == StepPlace::kAccel) {
      for (int id : n.inputs) {
        if (id < 0 || on_accel[id]) continue;
        if (p.values[id].kind == ValueKind::kConstant) p.accel_constants.push_back(id);
        else st.to_accel.push_back(id);
        on_accel[id] = 1;
      }
    }
    if (st.place == StepPlace::kNone) {  // a view is wherever its input is
      for (auto [o, i] : st.views) {
        int out = n.outputs[o], in = n.inputs[i];
        if (out < 0 || in < 0) continue;
        on_host[out] = on_host[in];
        on_accel[out] = on_accel[in];
      }
      continue;
    }
    for (int out : n.outputs) {
      if (out < 0 || st.place == StepPlace::kRunTime) continue;
      on_accel[out] = p.values[out].on_accel;
      on_host[out] = !p.values[out].on_accel;
    }
  }
}

// Release after the last reader: everything unguarded (dropping an arena value costs
// nothing; the others go back to their allocator).
void plan_releases(Planning& P) {
  if (!P.options.release) return;
  ExecutionPlan& p = P.p;
  for (size_t id = 0; id < P.nv(); ++id) {
    const ValuePlan& v = p.values[id];
    if (p.guards.guarded(static_cast<int>(id)) || v.first < 0) continue;
    int node = std::max(v.last, v.first);
    int step = node < P.nn() ? P.step_of_node[node] : -1;
    ONYX_ASSERT(step >= 0, "value ", P.g.values[id].name, " dies at a node that does not run");
    p.steps[step].release_after.push_back(static_cast<int>(id));
  }
}

void find_capture_blocker(Planning& P) {
  ExecutionPlan& p = P.p;
  const Graph& g = P.g;
  std::string& why = p.capture_blocker;
  if (!P.options.backend) {
    why = "the session has no accelerator";
    return;
  }
  if (!p.dynamic_boundaries.empty()) {
    const DynamicBoundary& b = p.dynamic_boundaries[0];
    why = cat(b.node, " has shapes known only at run time (", b.reason, ")");
    return;
  }
  for (const Step& st : p.steps) {
    if (st.place == StepPlace::kHost) why = cat(g.nodes[st.node].describe(), " runs on the CPU (", st.fallback, ")");
    if (st.place == StepPlace::kRunTime) why = cat(g.nodes[st.node].describe(), " is placed at run time");
    if (!why.empty()) return;
  }
  for (int id : g.outputs) {
    const ValuePlan& v = p.values[id];
    if (v.kind == ValueKind::kConstant) continue;
    if (v.kind != ValueKind::kOutput || !v.on_accel) {
      why = cat("output '", g.values[id].name, "' is not produced on ", P.options.backend->device().str());
      return;
    }
  }
  for (int id : g.inputs)
    if (dtype_is_object(p.values[id].type.dtype)) {
      why = cat("input '", g.values[id].name, "' holds ", dtype_name(p.values[id].type.dtype), " values");
      return;
    }
}

}  // namespace

ExecutionPlan plan_graph(const Graph& g, const PlanRequest& request, const PlanOptions& options) {
  Planning P(g, request, options);
  start_values(P);
  propagate_shapes(P);
  choose_places(P);
  find_lifetimes(P);
  share_storage(P);
  classify_groups(P);
  if (options.arena) place_arenas(P);
  plan_copies(P);
  plan_releases(P);
  find_capture_blocker(P);
  return std::move(P.p);
}

}  // namespace onyx
