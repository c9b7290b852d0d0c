// plan(graph, input types) -> ExecutionPlan: a pure function of the graph and the
// input shapes. It propagates shapes (evaluating the small integer subgraphs that
// exported models use for shape arithmetic), finds lifetimes, aliases and
// in-place reuse, and places every intermediate at a fixed offset of one arena.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/ir.h"
#include "ops/op.h"
#include "plan/liveness.h"
#include "plan/placement.h"

namespace onyx {

// Where a step runs.
enum class StepPlace : uint8_t {
  kHost,     // the op's CPU kernel
  kAccel,    // the accelerator backend's kernel
  kNone,     // no kernel: a view or a metadata read, on whatever device its input is
  kRunTime,  // decided when it runs (its input shapes are known only then)
};

struct PlanOptions {
  size_t alignment = 64;                  // host arena alignment
  size_t accel_alignment = 256;           // accelerator arena alignment (CUDA)
  // Whether a node runs on the accelerator, given its input types. Null: no accelerator.
  std::function<bool(const Node&, const std::vector<ValueType>&)> on_accel;
  size_t fold_limit_bytes = 64 * 1024;    // outputs up to this size may be computed while planning
  bool in_place = true;                   // let elementwise/normalization ops write over a dying input
};

// Where a value's bytes come from at run time.
enum class ValueKind {
  kExternal,  // graph input, initializer or outer-scope value: not ours
  kConstant,  // computed while planning and served on every run (memoized)
  kArena,     // at a fixed offset of the plan's arena
  kOutput,    // allocated at run time and handed to the caller (graph outputs and their alias sources)
  kDynamic,   // shape known only at run time: allocated then, released after its last reader
  kAbsent,    // produced by no step that runs (an omitted output)
};
std::string_view value_kind_name(ValueKind k);

struct ValuePlan {
  ValueType type;
  int first = -1;         // step that produces it (-1 for values present before the first step)
  int last = -1;          // last step that reads it (-1: nothing reads it)
  int root = -1;          // the value whose storage it uses (itself unless a view or in-place output)
  ValueKind kind = ValueKind::kAbsent;
  size_t offset = 0;      // arena offset of its root (kArena)
  size_t bytes = 0;       // its own bytes (when the shape is known)
  bool in_place = false;  // written over its input's storage
  bool on_accel = false;  // its storage is on the accelerator (arena values: the accelerator's arena)
};

// One arena: the intermediates of one device.
struct ArenaPlan {
  size_t bytes = 0;
  size_t lower_bound_bytes = 0;  // bytes live at the busiest step
  size_t no_reuse_bytes = 0;     // every value in its own bytes
  size_t alignment = 0;
  int peak_step = -1;
  std::string algorithm;
  double ratio() const { return lower_bound_bytes ? double(bytes) / double(lower_bound_bytes) : 1.0; }
};

struct DynamicBoundary {
  int step = -1;
  std::string node;     // Node::describe()
  std::string reason;
};

struct ExecutionPlan {
  std::vector<int> schedule;                // node indices in execution order (the graph's order)
  std::vector<ValuePlan> values;            // per value id
  std::vector<Tensor> constants;            // per value id; defined for kConstant
  std::vector<bool> skip;                   // per step: every output is a constant, nothing to run
  std::vector<StepPlace> place;             // per step
  ArenaPlan host_arena, accel_arena;
  GuardList guards;                         // what neither release nor in-place may touch (L5)
  std::vector<std::vector<int>> release_after;  // per step: values to drop after it runs
  std::vector<DynamicBoundary> dynamic_boundaries;
  int in_place_count = 0;
  int folded_nodes = 0;
  bool uses_accel = false;

  explicit ExecutionPlan(const Graph& g) : guards(g) {}
  // The arena where the work runs: the accelerator's when there is one.
  const ArenaPlan& main_arena() const { return uses_accel ? accel_arena : host_arena; }
};

// Runs one node on known inputs while planning (constant folding). The default
// runs the op's CPU kernel and cannot run nodes with subgraphs.
using NodeEvaluator = std::function<std::vector<Tensor>(const Node&, const std::vector<const Tensor*>&)>;
std::vector<Tensor> evaluate_node(const Node& node, const std::vector<const Tensor*>& inputs);

// `inputs` are the graph inputs' types in graph order (shapes fully known);
// nodes must already be resolved (Node::def). Throws onyx::Error naming the node.
ExecutionPlan plan_graph(const Graph& g, const std::vector<ValueType>& inputs, const PlanOptions& options = {},
                         const NodeEvaluator& evaluate = evaluate_node);

}  // namespace onyx
