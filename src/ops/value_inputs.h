// Which inputs of an op are read by VALUE in shape inference (a Reshape's target
// shape, a Slice's starts, ...). Those must be on the host when inference runs;
// every other input is needed only by its type and shape.
#pragma once

#include <vector>

#include "model/ir.h"

namespace onyx {

std::vector<int> value_inputs(const Node& node);
// Ops that read only their inputs' metadata (Shape, Size): they run on the host
// whatever device their input lives on, and move no bytes.
bool reads_only_metadata(const Node& node);

}  // namespace onyx
