// One node, computed: inference, output placement, kernel. The executor (eager or
// planned) and the planner's constant folding all go through this one function.
#pragma once

#include <functional>
#include <vector>

#include "ops/op.h"

namespace onyx {

// Chooses the memory for output `o` of inferred type `t` (shape fully known).
// Returns an undefined tensor to let compute_node allocate it from `alloc`.
using OutputBinder = std::function<Tensor(size_t o, const ValueType& t)>;

// Runs `node` on `inputs` (null for omitted optional inputs): infers output types
// from the inputs, makes view outputs share their input's storage, binds or
// allocates the rest, and runs the kernel. Throws onyx::Error (no node context:
// the caller adds it).
// `infer_values` (when given) are what inference may read by value (host tensors
// or null), for kernels whose inputs live on a device; `kernel` replaces the op's
// CPU kernel (a backend's launcher).
std::vector<Tensor> compute_node(const Node& node, const std::vector<const Tensor*>& inputs, Allocator& alloc,
                                 const SubgraphRunner* subgraphs = nullptr, const OutputBinder* bind = nullptr,
                                 const std::vector<const Tensor*>* infer_values = nullptr,
                                 const KernelFn* kernel = nullptr);

// Throws when the kernel left an output that the node names undefined: the node names more
// outputs than its op produces (ops of other domains than ONNX's have no schema checked at load).
void check_outputs_produced(const Node& node, std::span<const Tensor> outputs);

}  // namespace onyx
