// The public entry point: load a model once, run it many times.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "onyx/error.h"
#include "onyx/tensor.h"

namespace onyx {

struct SessionOptions {
  // Where the model runs: "cpu" (the only device in this build).
  std::string device = "cpu";
  // Return each intermediate to the allocator right after its last reader
  // (default). Off keeps every intermediate until the run ends.
  bool release_dead_values = true;
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
  NamedTensors run(const NamedTensors& feeds);
  const RunStats& last_run_stats() const;

 private:
  Session();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace onyx
