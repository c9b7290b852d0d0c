// The options of a session and of one run: one typed struct each, parsed once at
// the boundary (the CLI, a binding) and passed down whole.
#pragma once

#include <optional>

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "onyx/tensor.h"

namespace onyx {

class Communicator;  // onyx/communicator.h

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
  // Load-time constant folding: nodes computed from constants alone run once, at load, and
  // their results become weights (passes/fold_constants.h).
  bool fold_constants = true;
  // Load-time fusions of exporters' op patterns into one node each (passes/fuse_patterns.h).
  bool fuse_patterns = true;
  // The attention fusion among them (HF's eager attention -> one Attention node): by default on
  // for a Session on any device (the CPU's Attention kernel runs the fused case on its matrix
  // products, ops/attention_cpu.cpp), and for generation on CUDA devices only; true or false
  // forces it.
  std::optional<bool> fuse_attention;
  // The linear fusions among them (passes/fuse_linear.h): products by constant weights with
  // the weights stored output-major (onyx::Linear), a layer's Q, K and V products as one, the
  // MLP's gate and up products with the SiLU gating as one (onyx::SiluGateLinear). By default
  // on CUDA devices only (the decode step's one-row products stream each weight once); true or
  // false forces it.
  std::optional<bool> fuse_linear;
  // The rotary-cache fusion among them (passes/fuse_rotary_cache.h): a layer's rotary embeddings
  // of q and k and its two cache writes (Concat(past, new), or the generator's in-place
  // CacheUpdate) as one node, onyx::RotaryCache, one kernel. By default on CUDA devices only (four
  // launches per layer become one); true or false forces it.
  std::optional<bool> fuse_rotary_cache;
  // The rotary-attention fusion after it (passes/fuse_rotary_cache.h): a RotaryCache writing the
  // cache in place at an index (the generator's static cache) and the Attention reading it as one
  // node, onyx::RotaryCacheAttention; on CUDA one kernel per layer for a decode step. By default on
  // CUDA devices only, where the rotary-cache fusion is on; true or false forces it.
  std::optional<bool> fuse_rotary_attention;
  // Generation only (passes/position_tables.h): what a decoder computes from each position alone
  // (transformers' rotary cos and sin) made once at load for every position of the context and
  // gathered each step, instead of computed each step. Needs fuse_patterns.
  bool position_tables = true;
  // On a GPU: a matrix-product kernel of onyx's own may start while the kernel before it
  // finishes, reading its weights meanwhile (Hopper's programmatic dependent launch).
  bool overlap_launches = true;
  // On a GPU: page-locked host memory for the staging buffers of host <-> device copies.
  size_t pinned_memory_budget_bytes = size_t{1} << 30;
  // The host memory this session's allocations may hold at once: plan arenas, every
  // value a run allocates (Loop scan outputs as they grow), and the outputs handed out
  // and still alive. An allocation past it is an onyx::Error naming the value and the
  // bytes it asked for, made before the memory is asked of the system. 0 takes 80% of
  // the physical memory.
  size_t host_memory_budget_bytes = 0;
  // Threads of the CPU kernels (matrix products, convolutions, softmax, normalizations, large
  // elementwise ops), the calling thread included; 0 takes the CPUs this process may run on.
  int intra_op_threads = 0;
  // Tensor parallelism (passes/shard.h): the session runs rank `tensor_parallel_rank` of
  // `tensor_parallel_world`, holding its share of each attention block, gated MLP and the LM
  // head's vocabulary; the collectives that join the shares go through `communicator`, which
  // every rank's session shares (make_thread_communicator for ranks that are threads of one
  // process). World 1 (the default): the whole model.
  int tensor_parallel_world = 1;
  int tensor_parallel_rank = 0;
  std::shared_ptr<Communicator> communicator;
};

// Where a run leaves an output.
enum class OutputPlace {
  kHost,    // copied to the host (default): all such copies share one synchronization per run
  kDevice,  // left on the session's device: a device tensor the caller may feed back as an input
};

struct RunOptions {
  OutputPlace outputs = OutputPlace::kHost;
  // Exceptions by output name (unknown names are an error).
  std::map<std::string, OutputPlace> output_places;
  // Outputs written into the caller's tensors (on the host or the session's device, of the
  // output's dtype and shape), which run() then returns. An output bound to the very tensor
  // fed as an input updates that input: in place, as the op runs, where the producing op
  // says it may (the KV-cache ops: com.microsoft GroupQueryAttention's present in a shared
  // buffer, onyx.genai CacheUpdate) and reads that input last; else by a copy after the run.
  // In a capture session the graph writes into the bound tensors directly; binding other
  // tensors than at capture captures again.
  std::map<std::string, Tensor> bound_outputs;
  // A deadline for the run in seconds (0: none), checked between nodes and between a
  // Loop's iterations: past it the run stops with an onyx::Error naming the node.
  double timeout_seconds = 0;
  // Set from any thread to stop the run at its next check (an onyx::Error "run cancelled").
  // Either way the session stays usable.
  std::shared_ptr<std::atomic<bool>> cancel;
  // Time each node of the run (Session::last_run_stats().nodes). On a GPU each node then waits
  // for the device, so the run is slower; a run replayed from a CUDA graph has no per-node times.
  bool profile = false;
};

}  // namespace onyx
