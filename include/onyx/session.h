// The public entry point: load a model once, run it many times.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "onyx/error.h"
#include "onyx/options.h"
#include "onyx/tensor.h"

namespace onyx {

// What the planner decided for one input-shape signature (see `onyx plan`).
struct PlanSummary {
  struct Value {
    std::string name;
    std::string type;    // "float32[1,128,64]"
    std::string kind;    // arena, output, dynamic, constant, external
    size_t bytes = 0;
    size_t offset = 0;   // arena offset (kind "arena")
    int first = -1, last = -1;
    bool in_place = false;
    std::string alias_of;  // the value whose storage it shares, if not its own
    std::string device;    // "cpu" or "cuda:N"
  };
  struct Boundary {
    int step;
    std::string node, reason;
  };
  std::string device;          // where the arena below lives ("cpu" or "cuda:N")
  size_t host_arena_bytes = 0; // on a GPU session: the host arena for nodes that fell back
  int steps = 0;
  int folded_steps = 0;        // computed while planning (shape arithmetic, constants)
  int in_place = 0;
  size_t arena_bytes = 0;
  size_t lower_bound_bytes = 0;
  size_t no_reuse_bytes = 0;
  int peak_step = -1;
  std::string peak_node;
  std::string algorithm;
  size_t alignment = 0;
  std::vector<Boundary> dynamic_boundaries;
  std::vector<Value> values;   // every value the plan places or allocates
  // What each step that runs was decided to do.
  struct Step {
    std::string node;
    std::string place;                  // "host", "accel", "view" or "run-time"
    std::string fallback;               // why it runs on the CPU in a GPU session ("" otherwise)
    std::vector<std::string> to_host;   // values copied to the host right before it
    std::vector<std::string> to_device; // values copied to the device right before it
  };
  std::vector<Step> schedule;   // in execution order
  std::string capture_blocker;  // why this signature cannot be captured ("" when it can)
  double ratio() const { return lower_bound_bytes ? double(arena_bytes) / double(lower_bound_bytes) : 1.0; }
};

struct CaptureReport {
  size_t captures = 0;          // graphs captured (recaptures included)
  size_t recaptures = 0;        // after a broken replay contract
  size_t replays = 0;
  size_t eager_runs = 0;        // planned runs that did not replay
  size_t graphs = 0;            // captured graphs alive now
  double capture_seconds = 0;   // total time spent capturing and instantiating
  size_t shared_arena_bytes = 0;     // the one device arena all signatures share
  size_t sum_of_plan_arena_bytes = 0;  // what one arena per cached signature would take
  size_t retained_staging_bytes = 0;   // host staging owned by captured graphs
};

struct PlanCacheReport {
  size_t hits = 0, misses = 0, evictions = 0, entries = 0, arena_bytes = 0;
};

// A model input or output as the model declares it.
struct ValueDesc {
  std::string name;
  DType dtype = DType::kUndefined;
  bool rank_known = false;
  std::vector<int64_t> dims;             // -1 where unknown
  std::vector<std::string> dim_params;   // symbolic names, "" where none
  bool has_default = false;              // an input backed by an initializer
  bool is_tensor = true;                 // false for sequence/map/optional values
  DType element_dtype = DType::kUndefined;  // a sequence's or optional's element type
  std::string type_str() const;          // "float32[batch,64]"
};

struct ModelSummary {
  std::string path;
  std::string producer;
  std::string producer_version, domain, doc_string, graph_name, graph_doc_string;
  int64_t model_version = 0;
  std::map<std::string, std::string> metadata;  // the model's metadata_props
  int64_t ir_version = 0;
  std::map<std::string, int> opsets;  // "" is ai.onnx
  int64_t initializer_count = 0;
  int64_t initializer_bytes = 0;
  std::map<std::string, int> op_histogram;  // "Domain::Op" or "Op" -> count, subgraphs included
  int64_t node_count = 0;
};

// What a model declares, read without preparing it to run.
struct ModelInfo {
  ModelSummary summary;
  std::vector<ValueDesc> inputs, outputs;
  // Ops of the model that onyx has no definition for ("Op (domain, opset N)").
  std::vector<std::string> unsupported_ops;
};
ModelInfo inspect_model(const std::string& path);

// One node's time in a profiled run (RunOptions::profile).
struct NodeTime {
  std::string node;  // "node 'name' (Op)", as errors name it
  std::string op;    // "Op", or "domain::Op" outside the ONNX domain
  double seconds = 0;
};

struct RunStats {
  size_t peak_bytes = 0;     // the allocator's high-water mark during the run, above the bytes held before it
  size_t allocations = 0;    // allocations made during the run
  double seconds = 0;
  // With RunOptions::profile: the nodes that ran, in order, each with its time (subgraphs
  // counted in their node's). Nodes the plan makes views of their input take no step and are
  // not listed.
  std::vector<NodeTime> nodes;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Session {
 public:
  // Loads and prepares a model. Throws onyx::Error with the whole context chain.
  static std::unique_ptr<Session> load(const std::string& path, const SessionOptions& options = {});
  // The same from the bytes of a model in memory; external data resolves against `base_dir`.
  static std::unique_ptr<Session> load_from_bytes(const void* data, size_t size, const SessionOptions& options = {},
                                                  const std::string& base_dir = ".");
  ~Session();

  const std::vector<ValueDesc>& inputs() const;
  // What the model declares about itself (producer, domain, metadata, opsets, sizes).
  ModelSummary summary() const;
  const std::vector<ValueDesc>& outputs() const;

  // Runs the model. Feeds are borrowed for the call and may lie on the host or on the
  // session's device (used in place). Outputs are returned in the model's output
  // order, on the host unless `options` keeps them on the device, and stay valid after
  // the session is gone. Bad feeds (unknown name, missing input, wrong dtype, shape
  // or device) throw onyx::Error and leave the session usable.
  // Runs are serialized: the plan arenas of a session serve one run at a time.
  NamedTensors run(const NamedTensors& feeds, const RunOptions& options = {});
  // The statistics of the last run that finished, copied: safe to call while another
  // thread runs (it does not wait for that run).
  RunStats last_run_stats() const;

  // The plan a run with inputs of these shapes would use (inputs with defaults may be left out).
  PlanSummary plan(const std::map<std::string, std::vector<int64_t>>& input_shapes);
  PlanCacheReport plan_cache() const;

  // The device the session runs on.
  std::string device() const;
  // A copy of a host tensor on the session's device, to feed runs from there (the
  // tensor itself on a CPU session); and a host copy of any tensor (of a device output).
  Tensor to_device(const Tensor& host);
  Tensor to_host(const Tensor& t);
  // Nodes that ran on the CPU in a GPU session, each with the reason.
  std::vector<std::pair<std::string, std::string>> cpu_fallbacks() const;
  // The device memory governor's holders and their bytes (empty on the CPU).
  std::string memory_report() const;
  // Changes the device budget (GPU sessions); later leases are checked against it.
  void set_memory_budget(size_t bytes);

  // CUDA Graphs (capture != kOff): what happened so far, and releasing the graphs
  // (each with its slots and retained staging); later runs capture again.
  CaptureReport capture_report() const;
  void release_captured_graphs();
  // Releases the graph of one input-shape signature (feeds of those shapes); false when
  // that signature has no captured graph.
  bool release_captured_graph(const NamedTensors& example_feeds);
  // Zero-copy inputs: the device slots a captured signature reads, ready for the
  // caller to write into on `stream` (a cudaStream_t) before calling run() with the
  // same tensors as feeds (then nothing is copied in). Plans and warms the signature up.
  struct InputBinding {
    NamedTensors slots;
    void* stream = nullptr;
  };
  InputBinding bind_inputs(const NamedTensors& example_feeds);

 private:
  Session();
  static std::unique_ptr<Session> prepare(const SessionOptions& options, const std::function<struct Model()>& load);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx
