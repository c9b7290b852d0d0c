// The public entry point: load a model once, run it many times.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "onyx/error.h"
#include "onyx/tensor.h"

namespace onyx {

// How a run holds its intermediate values.
enum class MemoryMode {
  kPlanned,  // one arena per input-shape signature, every intermediate at a planned offset (default)
  kRelease,  // allocate each value when produced, free it right after its last reader
  kKeepAll,  // allocate each value when produced, keep everything until the run ends (debugging)
};

// CUDA Graphs for repeated input shapes (GPU sessions).
enum class CaptureMode {
  kOff,      // every run is eager (default)
  kAuto,     // per input-shape signature: run 1 eager (warm-up), run 2 captures, later runs replay;
             // a signature that cannot be captured runs eagerly, and the session says why once
  kRequire,  // as kAuto, but a signature that cannot be captured is an error
};

struct SessionOptions {
  // Where the model runs: "cpu", "cuda" (= "cuda:0") or "cuda:N". Resolved once by
  // resolve_device(); a device that does not exist is an error naming those that do.
  std::string device = "cpu";
  // On a GPU: let a node with no GPU kernel run on the CPU (reported once per node).
  // Off turns any such fallback into an error.
  bool allow_cpu_fallback = true;
  // On a GPU: this session's device-memory budget in bytes; 0 takes a fraction
  // (memory_fraction) of the memory free when the session starts.
  size_t memory_budget_bytes = 0;
  double memory_fraction = 0.9;
  CaptureMode capture = CaptureMode::kOff;
  // Validation mode for replays (slower; off by default): before each replay, the host
  // staging bytes a graph reads are checked against their hash at capture, and the
  // device arena is poisoned (every byte 0xFF, NaN for floats).
  bool validate_replays = false;
  // Where one-time notices go (CPU fallbacks, signatures run eagerly, broken replay
  // contracts); stderr when empty.
  std::function<void(const std::string&)> log;
  MemoryMode memory = MemoryMode::kPlanned;
  // Plans (each with its arena) kept for recent input-shape signatures; the least
  // recently used is dropped beyond this.
  size_t plan_cache_capacity = 8;
};

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
  std::string type_str() const;          // "float32[batch,64]"
};

struct ModelSummary {
  std::string path;
  std::string producer;
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

struct RunStats {
  size_t peak_bytes = 0;     // the allocator's high-water mark during the run, above the bytes held before it
  size_t allocations = 0;    // allocations made during the run
  double seconds = 0;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Session {
 public:
  // Loads and prepares a model. Throws onyx::Error with the whole context chain.
  static std::unique_ptr<Session> load(const std::string& path, const SessionOptions& options = {});
  ~Session();

  const std::vector<ValueDesc>& inputs() const;
  const std::vector<ValueDesc>& outputs() const;

  // Runs the model. Feeds are borrowed for the call; outputs are returned in the
  // model's output order and stay valid after the session is gone. Bad feeds
  // (unknown name, missing input, wrong dtype or shape) throw onyx::Error and
  // leave the session usable.
  // Runs are serialized: the plan arenas of a session serve one run at a time.
  NamedTensors run(const NamedTensors& feeds);
  const RunStats& last_run_stats() const;

  // The plan a run with inputs of these shapes would use (inputs with defaults may be left out).
  PlanSummary plan(const std::map<std::string, std::vector<int64_t>>& input_shapes);
  PlanCacheReport plan_cache() const;

  // The device the session runs on.
  std::string device() const;
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
  // Test-only: staging buffers used under capture go back to the pool like eager ones (seed 000).
  void set_release_staging_under_capture_for_testing(bool release);

 private:
  Session();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx
