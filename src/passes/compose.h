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

// Fixes the graph input `condition` (a bool) to `value`: the If node it decides is replaced by
// the nodes of the branch chosen (then_branch for true), reading the values the branch took
// from the outer graph, and writing the If's outputs. Then every graph input no node reads any
// more is dropped (with `condition`). A merged decoder (Optimum's decoder_model_merged.onnx:
// one If on use_cache_branch) becomes its first-run graph (false) or its step graph (true),
// without control flow. Nodes nothing reads go too. An error says why not: no such input, or an input read by anything but
// one If, or a branch whose nested subgraphs read a value whose name the inlining had to change.
void inline_branch(Graph& g, const std::string& condition, bool value);

// Removes the named outputs from the graph, then every node and input that only they needed.
void drop_outputs(Graph& g, const std::vector<std::string>& names);

}  // namespace onyx
