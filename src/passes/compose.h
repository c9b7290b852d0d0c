// Joins two graphs into one: `front` runs first and its outputs feed inputs of `g`, so the two
// are planned, fused and captured as one graph (a vision-language folder's embedding model in
// front of its decoder).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/ir.h"

namespace onyx {

// Puts `front`'s nodes before `g`'s. Each link (front output, g input) turns that input of `g`
// into a value computed from the output. `front`'s inputs become inputs of `g` under their own
// names (one `g` already has is shared); every other value of `front` is renamed `prefix` + its
// name. An error names what cannot be joined: a link whose ends are missing, a clash of names, a
// node of `front` with a subgraph (control flow), or an input of `front` whose type differs from
// `g`'s input of the same name.
void prepend_graph(Graph& g, const Graph& front, const std::vector<std::pair<std::string, std::string>>& links,
                   const std::string& prefix);

}  // namespace onyx
