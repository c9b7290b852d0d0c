// The load-time pass pipeline, one for every device and every component (a session, a
// language model, each graph of a pipeline): first, for a tensor-parallel rank, the sharding pass
// (passes/shard.h); then on the CPU the QDQ fusions, constant folding, then
// the pattern fusions, then on CUDA the linear fusions and the rotary-cache fusion, and on the CPU
// the dense-layer fusions (`fuse_cpu`), each as the session options ask.
#pragma once

#include "onyx/device.h"
#include "onyx/options.h"
#include "passes/fold_constants.h"
#include "passes/fuse_cpu.h"
#include "passes/fuse_linear.h"
#include "passes/fuse_patterns.h"
#include "passes/fuse_qdq.h"
#include "passes/fuse_rotary_cache.h"
#include "passes/shard.h"

namespace onyx {

struct OptimizeReport {
  ShardReport shard;
  QdqFuseReport qdq;
  FoldReport fold;
  FuseReport fuse;
  LinearReport linear;
  RotaryCacheReport rotary_cache;
  int rotary_attention = 0;  // RotaryCacheAttention nodes (fuse_rotary_attention)
  CpuFuseReport cpu;
  int dead_nodes = 0;  // nodes whose outputs nothing read after the passes, dropped
};

// What a caller's defaults differ in. A session fuses eager attention on every device; generation
// only on CUDA (its CPU graphs keep the cache rewrite's form).
struct OptimizeDefaults {
  bool fuse_attention_on_cpu = false;
};

// `device` is the resolved device the graph will run on (the fusions' defaults depend on it).
OptimizeReport optimize_graph(Graph& g, const SessionOptions& options, const Device& device,
                              OptimizeDefaults defaults = {});

// Whether the rotary-attention fusion runs for these options on `device` (it needs the rotary-cache
// fusion before it).
bool fuse_rotary_attention_on(const SessionOptions& options, const Device& device);

}  // namespace onyx
