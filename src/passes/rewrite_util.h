// What the load-time rewrites share: building the nodes and attributes they put in, swapping
// them into the graph in order, and finding the values known at load.
#pragma once

#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "model/ir.h"

namespace onyx {

Attribute make_int_attr(const char* name, int64_t v);
Attribute make_float_attr(const char* name, float v);
Attribute make_ints_attr(const char* name, std::vector<int64_t> v);
Attribute make_string_attr(const char* name, std::string v);

Node make_node(std::string name, std::string domain, std::string op, int opset, std::vector<int> inputs,
               std::vector<int> outputs, std::vector<Attribute> attributes = {});

// Every value's producer from g.nodes (after nodes were inserted, removed or reordered).
void set_producers(Graph& g);

// Puts each new node at its position (the index of the node it replaces; several at one index in
// the order given, in place of that node) and drops the nodes marked removed; then recomputes
// every value's producer.
void replace_nodes(Graph& g, const std::vector<bool>& removed, std::vector<std::pair<size_t, Node>>& replace);

// The values a rewrite may not drop for another: graph outputs, and values subgraphs read by name.
std::unordered_set<int> pinned_values(const Graph& g);

// Every node input that reads `from` reads `to` instead.
void redirect_reads(Graph& g, int from, int to);

// A value known at load: an initializer no feed replaces, or a Constant node's value; null
// otherwise.
const Tensor* constant_value(const Graph& g, int id);

// The element type of value `id` where the graph shows it: declared, a constant's, a Cast's
// target, or through ops whose output has their data input's type (elementwise arithmetic, moves
// of data, reductions, gathers) and the fused products (their weight's); kUndefined otherwise.
DType traced_dtype(const Graph& g, int id);

// The entries [start, end) of its input's shape a Shape node of opset 15 takes (its start and end,
// negative from the end, clamped to [0, rank]).
void shape_range(const Node& n, int64_t rank, int64_t& start, int64_t& end);

// Adds `t` as a new initializer named after `base` (made unique), and returns its value id.
int add_initializer(Graph& g, const std::string& base, Tensor t);

// Drops the nodes of the standard domain whose outputs nothing reads (no node, subgraph or graph
// output), chains of them too: what a rewrite left behind (a Slice whose only reader a fold took
// away). Returns how many went.
int drop_dead_nodes(Graph& g);

// Drops those of `candidates` that are initializers no node reads and no graph output names
// (the weights a rewrite replaced); returns how many.
int drop_unread_initializers(Graph& g, const std::vector<int>& candidates);

}  // namespace onyx
