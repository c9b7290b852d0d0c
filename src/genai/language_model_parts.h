// The parts of LanguageModel that its two source files share (internal to src/genai).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "genai/language_model.h"

namespace onyx::genai {

// One executor over one graph, with the decoder's roles found among its inputs and outputs.
struct LanguageModel::Runner {
  Graph* graph = nullptr;
  std::unique_ptr<GraphExecutor> exec;
  std::map<std::string, size_t> inputs;   // name -> position in graph.inputs
  std::map<std::string, size_t> outputs;  // name -> position in graph.outputs

  Runner(Graph& g, const SessionOptions& o, Backend* backend, std::shared_ptr<Allocator> host,
         std::shared_ptr<DeviceWeights> weights)
      : graph(&g), exec(std::make_unique<GraphExecutor>(g, OpRegistry::global(), std::move(host), o, backend,
                                                        std::move(weights))) {
    for (size_t i = 0; i < g.inputs.size(); ++i) inputs[g.values[g.inputs[i]].name] = i;
    for (size_t i = 0; i < g.outputs.size(); ++i) outputs[g.values[g.outputs[i]].name] = i;
  }
};

// What a generation in flight keeps between its runs.
struct LanguageModel::Batch {
  int64_t size = 0;  // rows the decoder runs: the bucket
  int64_t rows = 0;  // of which sequences (the rest pad the bucket)
  int64_t prompt = 0, capacity = 0, steps = 0;
  int64_t grows = 0;            // times the cache grew (by whole blocks) during this generation
  std::vector<int64_t> length;  // per row: positions of the cache this row has filled (shared)
  std::vector<int64_t> offset;  // per row: its left padding (static, growing)
  std::vector<Tensor> cache;    // per layer: key, value, [batch, kv heads, capacity, head size]
  std::vector<Tensor> past;     // growing: the last presents, per layer key, value
};

// Serving's cache: one set of tensors whose rows are slots, and a spare row of each (swaps).
struct LanguageModel::Slots {
  int64_t count = 0, capacity = 0;
  std::vector<Tensor> cache;    // per layer: key, value, [count, kv heads, capacity, head size]
  std::vector<Tensor> spare;    // per layer: key, value, [1, kv heads, capacity, head size]
  std::vector<int64_t> filled;  // per slot: positions holding its sequence's entries
};

// A vision-language folder's vision model and what the next prompt run feeds the embedding.
struct LanguageModel::Vision {
  ImageProcessor processor;
  onyx::Model model;                 // the vision model
  std::unique_ptr<Backend> backend;  // its pools of the decoder's device (null on the CPU)
  std::unique_ptr<GraphExecutor> exec;
  size_t pixel_input = 0, features_output = 0;
  int64_t hidden = 0;                // the features' width (the embedding model's input)
  DType dtype = DType::kFloat32;     // and their element type
  size_t weight_bytes = 0, arena_bytes = 0, arena_lower_bound = 0, arena_no_reuse = 0;
  std::vector<std::vector<Tensor>> pending;  // per sequence, for the next start()
  Tensor batch;                              // the prompt run's features, [tokens, hidden]
};

// The run-ahead's state (LanguageModel::step): two readbacks of drawn tokens, for the step being
// taken and the one launched ahead of it.
struct LanguageModel::Ahead {
  static constexpr int64_t kMaxRows = 1024;  // the largest bucket that runs ahead
  std::unique_ptr<DeviceReadback> readback[2];
  int next_slot = 0;          // the readback the next launched step uses
  bool live = false;          // a step launched ahead and not yet taken or forgotten
  int slot = 0;               // its readback
  Tensor tokens;              // its drawn tokens, on the device ([bucket])
  Draw draw;                  // the draw it was launched with
  std::vector<int64_t> fed;   // the tokens it was fed (the rows' draws of the step before it)
  bool serving = false;       // a decode step of the slots (decode()), not of a generation (step())
  std::vector<int64_t> active;  // serving: the slots it advanced
};

// The names of what onyx appends to the decoder to draw tokens on its device.
inline constexpr const char* kDrawOptions = "onyx_draw_options";
inline constexpr const char* kDrawRng = "onyx_draw_rng";
inline constexpr const char* kDrawHistory = "onyx_draw_history";
inline constexpr const char* kDrawPosition = "onyx_draw_position";
inline constexpr const char* kDrawGeneratedStart = "onyx_draw_generated_start";
inline constexpr const char* kDrawLogitBias = "onyx_draw_logit_bias";  // [vocab] float32, added to the logits
inline constexpr const char* kNextToken = "onyx_next_token";
inline constexpr const char* kNextLogits = "onyx_next_logits";

using Feeds = std::vector<std::pair<std::string, Tensor>>;

// `draw` (a row per sequence) with greedy draws for the padding rows up to B (unread).
Draw padded_draw(const Draw& draw, int64_t B);

// The check that keeps a cache rewrite: "" when `got`'s logits (float32, on the host) are within
// the tolerance of a cache of `kv_dtype` (1e-4 of the largest for float32, else 2e-2) of
// `want`'s, else `what` and the largest difference.
std::string compare_rewrite_logits(const Tensor& want, const Tensor& got, DType kv_dtype, const std::string& what);

// `t` (float32, float16 or bfloat16, on the host) as `want`, one of the three.
Tensor as_float_type(const Tensor& t, DType want);

// The graph that writes a prompt's presents into a static cache: per tensor i, inputs
// "cache_i" (the cache, written in place: bind output "out_i" to it) and "new_i", and one
// "index" (the first position written), by onyx.genai::CacheUpdate.
Graph make_fill_graph(size_t tensors);

// Appends onyx.genai::Sample to a decoder graph: the next token (and the logits it was drawn
// from) become the outputs; the full logits stay inside, in the plan's arena. With
// `logit_bias`, the logits (as float32) plus the input kDrawLogitBias ([vocab]: 0, or -inf for
// an id not to draw) are what Sample reads.
void append_sampler(Graph& g, const std::string& logits_name, bool logit_bias = false);

// On a decoder with Sample appended, for prompts whose rows end at the last position (left
// padding): the product that makes the logits (MatMul by a 2-D constant, the onyx linear ops,
// the CPU's packed product without a residual, the 4-bit products), when it has no other
// output, reads its input (and a normalized product's skip) sliced to the last position, and
// Sample reads that one position.
// Returns whether it rewrote; the graph is unchanged when not.
bool slice_prompt_logits(Graph& g, const std::string& logits_name);

// The Sample node's inputs for `size` rows, of which the first `rows` are sequences (the rest
// pad a bucket and draw greedily): options, seeds and draw counter, the ids for the penalties
// (up to `history_width` of each row's last ids) and the position each row's logits are read at.
void add_draw_inputs(Feeds& f, int64_t size, int64_t rows, int64_t history_width,
                     const std::vector<int64_t>& positions, const Draw& draw);

}  // namespace onyx::genai
