#include "passes/optimize.h"

#include "onyx/communicator.h"
#include "ops/registry.h"
#include "passes/rewrite_util.h"

namespace onyx {

bool fuse_rotary_attention_on(const SessionOptions& options, const Device& device) {
  return options.fuse_patterns && options.fuse_rotary_cache.value_or(!device.is_cpu()) &&
         options.fuse_rotary_attention.value_or(!device.is_cpu());
}

OptimizeReport optimize_graph(Graph& g, const SessionOptions& options, const Device& device,
                              OptimizeDefaults defaults) {
  OptimizeReport r;
  // A group of one (a communicator given at world 1) is sharded all the same: each share is the
  // whole and each collective a copy, so that one GPU runs the tensor-parallel path.
  if (options.tensor_parallel_world != 1 || options.tensor_parallel_rank != 0 || options.communicator) {
    const int world = options.tensor_parallel_world;
    ONYX_CHECK(options.communicator, "tensor parallelism over ", world, " ranks needs SessionOptions.communicator");
    ONYX_CHECK(options.communicator->world() == world, "SessionOptions.communicator joins ",
               options.communicator->world(), " ranks, tensor_parallel_world says ", world);
    const int gpu = options.communicator->device(options.tensor_parallel_rank);
    if (gpu >= 0)
      ONYX_CHECK(!device.is_cpu() && device.index == gpu, "tensor-parallel rank ", options.tensor_parallel_rank,
                 " of this group runs on cuda:", gpu, ", but the session's device is ", options.device);
    // Before every fusion: the pass reads the graph as the exporter wrote it.
    r.shard = shard_tensor_parallel(g, options.tensor_parallel_rank, world, register_communicator(options.communicator));
  }
  const bool linear = options.fuse_patterns && options.fuse_linear.value_or(!device.is_cpu());
  // Before folding, which would turn each weight's DequantizeLinear into a float copy. On the CPU
  // only: the integer ops have no CUDA kernels, while DequantizeLinear and MatMul do.
  if (options.fuse_patterns && device.is_cpu()) r.qdq = fuse_qdq(g);
  // Before folding, a MatMul by Transpose(W) still shows W as stored: Linear reads it as it
  // is instead of folding a transposed copy and transposing that back.
  if (linear) r.linear = linear_from_matmul(g);
  if (options.fold_constants) r.fold = fold_constants(g, OpRegistry::global());
  if (options.fuse_patterns) r.fuse = fuse_patterns(g, FuseOptions{options.fuse_attention.value_or(!device.is_cpu() || defaults.fuse_attention_on_cpu)});
  if (linear) {
    // Weights that folding made constant (a Cast of a weight) become Linear too.
    const LinearReport more = linear_from_matmul(g);
    const LinearReport sliced = split_sliced_linears(g);
    const LinearReport grouped = group_linears(g);
    r.linear.normed = norm_into_linear(g).normed;
    r.linear.linears += more.linears;
    r.linear.transposed += more.transposed;
    r.linear.weight_bytes += more.weight_bytes + sliced.weight_bytes + grouped.weight_bytes;
    r.linear.sliced = sliced.sliced;
    r.linear.gated = grouped.gated;
    r.linear.groups = grouped.groups;
    r.linear.grouped = grouped.grouped;
    // The 4-bit products reading one input (a layer's Q, K, V; gate and up): one product, split.
    const LinearReport nbits = group_nbits(g);
    r.linear.groups += nbits.groups;
    r.linear.grouped += nbits.grouped;
    r.linear.weight_bytes += nbits.weight_bytes;
    // The norms before them (onyx::RmsNormLinearNBits).
    if (nbits.groups > 0) r.linear.normed += norm_into_linear(g).normed;
    // Last: the bias Adds after the products (which norm_into_linear's Linear form has none of).
    const LinearReport biased = biases_into_linear(g);
    r.linear.biased = biased.biased;
    r.linear.weight_bytes += biased.weight_bytes;
  }
  // On the fused graph: RotaryHalf and Attention are what it matches.
  if (options.fuse_patterns && options.fuse_rotary_cache.value_or(!device.is_cpu())) r.rotary_cache = fuse_rotary_cache(g);
  // Fires on the indexed RotaryCache only: a graph written with CacheUpdate; the generator's
  // rewritten decoder calls it again after its cache rewrite (fuse_rotary_attention_after_rewrite).
  if (fuse_rotary_attention_on(options, device)) r.rotary_attention = fuse_rotary_attention(g);
  if (options.fuse_patterns && device.is_cpu()) r.cpu = fuse_cpu(g);
  // What the rewrites left unread (a Slice whose only reader a fold dropped): not run every step.
  if (options.fuse_patterns || options.fold_constants) r.dead_nodes = drop_dead_nodes(g);
  return r;
}

}  // namespace onyx
