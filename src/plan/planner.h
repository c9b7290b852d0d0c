// plan(graph, input types) -> ExecutionPlan: a pure function of the graph, the
// input shapes and where the inputs live. It propagates shapes (evaluating the small
// integer subgraphs that exported models use for shape arithmetic), resolves each
// step's kernel and device once, finds lifetimes, aliases and in-place reuse, places
// every intermediate at a fixed offset of one arena per device, and lists the copies
// between devices and the releases. A run reads these decisions; it never infers a
// planned step's shapes or looks up its kernel again.
#pragma once

#include <string>
#include <vector>

#include "backends/backend.h"
#include "model/ir.h"
#include "ops/op.h"
#include "plan/guards.h"
#include "plan/placement.h"

namespace onyx {

// Where a step runs.
enum class StepPlace : uint8_t {
  kHost,     // the op's CPU kernel
  kAccel,    // the accelerator backend's kernel
  kNone,     // no kernel: a view, on whatever device its input is
  kRunTime,  // decided when it runs: its shapes are known only then (a dynamic region)
};
std::string_view step_place_name(StepPlace p);

// Where a value's bytes come from at run time.
enum class ValueKind {
  kExternal,   // graph input, initializer or outer-scope value: not ours
  kConstant,   // computed while planning and served on every run (memoized)
  kArena,      // at a fixed offset of the plan's arena (planned mode)
  kOutput,     // allocated each run and handed to the caller (graph outputs and their alias sources)
  kAllocated,  // allocated when produced, released after its last reader (release and keep modes)
  kDynamic,    // shape known only at run time: allocated then, released after its last reader
  kAbsent,     // produced by no step that runs (an omitted output)
};
std::string_view value_kind_name(ValueKind k);

struct ValuePlan {
  ValueType type;
  int first = -1;         // node that produces it (-1 for values present before the first node)
  int last = -1;          // last node that reads it (-1: nothing reads it)
  int root = -1;          // the value whose storage it uses (itself unless a view or in-place output)
  ValueKind kind = ValueKind::kAbsent;
  size_t offset = 0;      // arena offset of its root (kArena)
  size_t bytes = 0;       // its own bytes (when the shape is known)
  bool in_place = false;  // written over its input's storage
  bool on_accel = false;  // where its storage lives (for a graph input: where it was fed)
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
  int step = -1;        // node index
  std::string node;     // Node::describe()
  std::string reason;
};

// One node that runs, with everything decided about it.
struct Step {
  int node = -1;                   // index into Graph::nodes
  StepPlace place = StepPlace::kHost;
  // The resolved kernel: the op's CPU kernel (kHost) or the backend's (kAccel); empty
  // for kNone, and for kRunTime steps (resolved when their types are known).
  KernelFn kernel;
  bool has_subgraphs = false;      // its kernel runs subgraphs (If, Loop, Scan)
  // Values copied to this step's device right before it runs: the first reader on
  // that device of a value that lives on the other one. The copy lives as long as the value.
  std::vector<int> to_host;
  std::vector<int> to_accel;
  std::vector<int> release_after;  // unguarded values whose last reader this is
  std::string fallback;            // why a session with a backend runs it on the CPU ("" otherwise)
  // kNone steps: (output, input) pairs whose output is the input's storage under the output's
  // shape: the op's own views (Reshape), or a Transpose that moves only size-1 axes at the
  // planned shapes (its elements keep their order, so nothing needs to move).
  std::vector<std::pair<int, int>> views;
};

struct ExecutionPlan {
  std::vector<Step> steps;           // in execution order; nodes computed while planning are not here
  std::vector<ValuePlan> values;     // per value id
  std::vector<Tensor> constants;     // per value id; defined for kConstant (host tensors owned by the plan)
  std::vector<bool> folded;          // per node: computed while planning, never run
  std::vector<int> accel_constants;  // constants that accelerator steps read: uploaded once per plan
  ArenaPlan host_arena, accel_arena;
  GuardList guards;                  // what neither release nor in-place may touch (L5)
  std::vector<DynamicBoundary> dynamic_boundaries;
  // Why this plan cannot be captured into a CUDA graph ("" when it can).
  std::string capture_blocker;
  int in_place_count = 0;
  int folded_nodes = 0;
  bool uses_accel = false;
  bool arena = true;                 // intermediates at planned offsets (planned mode)

  explicit ExecutionPlan(const Graph& g) : guards(g) {}
  // The arena where the work runs: the accelerator's when there is one.
  const ArenaPlan& main_arena() const { return uses_accel ? accel_arena : host_arena; }
  // The steps that fall back to the CPU, with their reasons.
  std::vector<const Step*> fallbacks() const;
};

// What the plan is for: the inputs' types and where they live.
struct PlanRequest {
  std::vector<ValueType> inputs;        // graph inputs' types in graph order (shapes fully known)
  std::vector<bool> inputs_on_accel;    // per graph input: fed on the accelerator (empty: all on the host)
  std::vector<ValueType> outer;         // per Graph::outer_values: the enclosing values' types (subgraphs)
  std::vector<bool> resident_on_accel;  // per value id: initializers already on the accelerator
};

struct PlanOptions {
  bool arena = true;                      // false: values are allocated when produced (release and keep modes)
  bool release = true;                    // drop each unguarded value after its last reader (false: keep all)
  bool in_place = true;                   // let elementwise and normalization ops write over a dying input
  size_t alignment = 64;                  // host arena alignment
  size_t accel_alignment = 256;           // accelerator arena alignment
  size_t fold_limit_bytes = 64 * 1024;    // outputs up to this size may be computed while planning
  Backend* backend = nullptr;             // resolves accelerator kernels; null: everything on the CPU
  // Evaluates a subgraph while planning (folding an If whose condition is known); null:
  // nodes with subgraphs are never folded.
  SubgraphRunner evaluate_subgraph;
};

// Nodes must already be resolved (Node::def). Throws onyx::Error naming the node.
ExecutionPlan plan_graph(const Graph& g, const PlanRequest& request, const PlanOptions& options = {});

}  // namespace onyx
