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
std::vector<Tensor> compute_node(const Node& node, const std::vector<const Tensor*>& inputs, Allocator& alloc,
                                 const SubgraphRunner* subgraphs = nullptr, const OutputBinder* bind = nullptr);

}  // namespace onyx
