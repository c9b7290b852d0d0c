// Tensor parallelism at load (Megatron-style): rank `rank` of `world` keeps its share of each
// decoder layer and the collectives that put the shares together.
//
// - Attention (com.microsoft GroupQueryAttention): the Q, K and V products (packed as one, or
//   three) keep the columns of this rank's query heads and KV heads (their bias too); the node
//   runs num_heads / world and kv_num_heads / world heads, so the past and present caches hold
//   this rank's KV heads; the output product (o) keeps the matching rows of its weight and is
//   followed by onyx::AllReduce (the sum of the ranks' partial products).
// - The SiLU-gated MLP (Mul(Mul(g, Sigmoid(g)), u), g and u products of one input, the product
//   after it "down"): gate and up keep a world-th of the columns, down the matching rows, then
//   onyx::AllReduce.
// - The LM head (a product whose output is a graph output): a world-th of the vocabulary's
//   columns, then onyx::AllGather along the last axis.
// Products are MatMul by a constant weight [K, N] or com.microsoft MatMulNBits (rows of its
// weight are outputs; a row share of K needs whole quantization blocks). Everything else (the
// embedding, the norms, the residual adds) runs whole on every rank. A head count or a width
// that the ranks cannot share evenly is an error naming the node.
#pragma once

#include <cstdint>

#include "model/ir.h"

namespace onyx {

struct ShardReport {
  int attention = 0;    // attention blocks split by heads
  int mlp = 0;          // gated MLPs split by their intermediate width
  int lm_head = 0;      // vocabulary-split output products
  int collectives = 0;  // AllReduce and AllGather nodes put in
  int64_t weight_bytes = 0;  // bytes of the weights this rank keeps of the split products
};

ShardReport shard_tensor_parallel(Graph& g, int rank, int world, int64_t communicator);

}  // namespace onyx
