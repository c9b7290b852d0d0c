// Tables of what a decoder computes from each position alone. transformers' exports make their
// rotary tables from position_ids every step: Unsqueeze, Cast, a product by the inverse
// frequencies, Concat, Cos and Sin (five kernels a step), where a builder's graph gathers two rows
// of a table made at export. Where the positions are known to lie in [0, count) (the generator
// feeds every position of its context, and no other), the values such a chain makes are computed
// once at load for every position, and each run gathers its rows: Gather(table, positions).
//
// A value is tabulated only where the graph shows that each of its elements depends on one
// position alone: starting from the positions input, the pass follows nodes whose every input is
// followed already or a constant, and whose op keeps each output element on the positions at one
// index of the positions' axes (the value's other axes, "features", are of fixed size):
//
//   Cast and one-input elementwise math (Cos, Sin, Neg, Exp, Sqrt, ...): the same axes;
//   Add, Sub, Mul, Div, Pow: of two followed values with the same axes, or of one and a constant
//     whose dimensions at the positions' axes are 1;
//   Unsqueeze, Squeeze of features of 1, Transpose, Concat along a feature axis;
//   MatMul of a followed value and a constant, the sum over a feature axis.
//
// The shape of the positions (Shape and the arithmetic on it) is followed too, for one use:
// Optimum's exports expand the inverse frequencies to the batch's size, Expand(c, shape), before
// the product with the positions; such an Expand is read as c (MatMul broadcasts its batch axes).
// That it adds batch axes only, and that the chain holds no other dependence on the positions'
// shape, is checked: the chain is computed for the table (positions 0 .. count - 1 as one row) and
// for a few positions in another shape (2, 3, ...), and the second must be the table's rows.
// torch.export's exports (torch 2.11) take that batch from another input's shape (a past cache's:
// Concat(Shape(past, 0, 1), [1], [1])); such an Expand is read as c too where its shape has c's
// rank and constant last two entries that keep c's last two dimensions, so that it can only
// expand the product's batch axes.
//
// A node with any other input (a value computed from the whole positions tensor, as a ReduceMax
// choosing long-context factors) or any other op ends the chain there. The values the chain
// hands to the rest of the graph with the positions' axes first are tabulated where that saves
// kernels (the chain's kernels outnumber the Gathers) and the tables fit in `max_bytes`; the
// chain's nodes then go.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "model/ir.h"

namespace onyx {

struct PositionTableReport {
  int tables = 0;      // Gathers made (one per tabulated value)
  int nodes = 0;       // nodes gone from the graph with them
  size_t bytes = 0;    // bytes of the tables
  std::string why_not; // where no table was made and the positions are read: why
};

// Tabulates, over positions [0, count), the values computed from graph input `positions` alone.
PositionTableReport tabulate_positions(Graph& g, const std::string& positions, int64_t count, size_t max_bytes);

}  // namespace onyx
