// Load-time constant folding: every node whose inputs are all constants (initializers that no
// feed can replace, or results of nodes folded before it) is computed once, on the CPU, and its
// outputs become initializers; the node is gone from the graph. A Transpose of a tied
// embedding (the exporters' LM head) then costs nothing per run instead of moving the whole
// weight on every call.
//
// A Shape of a value whose dimensions the graph fixes (a Reshape by constant entries, a
// Transpose of one, ...) folds too, and so does an entry of a Shape (Gather by a constant index)
// where that dimension is fixed: the exporters' shape arithmetic on a head's size then folds. A
// Slice that keeps all of its (fixed-size) input is dropped for its input, and so is a Concat
// input of no entries along the axis.
//
// Not folded: ops that are not deterministic (never_fold), nodes with subgraphs, nodes whose
// outputs are graph outputs, the quantization ops (QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear: a QDQ model keeps its integer weights for integer kernels), and
// nodes whose outputs would take more bytes than their inputs plus `growth_allowance`
// (an Expand or ConstantOfShape that makes a small model large).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/ir.h"
#include "ops/registry.h"

namespace onyx {

struct FoldReport {
  int nodes = 0;                  // nodes folded
  size_t bytes = 0;               // bytes of the initializers made
  size_t freed_initializers = 0;  // initializers that no node read any more
  std::vector<std::string> ops;   // op type of each folded node
  int shapes = 0;                 // of them, Shapes (or entries of one) of values whose dimensions are fixed
  int dead_shapes = 0;            // Shape nodes dropped: every reader folded
  int identities = 0;             // Slices that keep all of their input, and empty Concat inputs, dropped
};

FoldReport fold_constants(Graph& g, const OpRegistry& registry, size_t growth_allowance = 64 * 1024);

}  // namespace onyx
