// Load-time checks of a model against ONNX's operator schemas, as strict as the ONNX checker
// and onnxruntime for what they decide before any type is inferred: the opsets a model imports,
// each node's input and output counts, its omitted single (non-optional) inputs and outputs, its
// attributes (known names, their kinds, the required ones, none twice), and the signatures of
// the subgraphs of If, Loop and Scan. The facts come from onnx_schemas.inc, generated from the
// pinned onnx by tools/gen_onnx_schemas.py. Ops of other domains (com.microsoft, onyx.genai)
// have no ONNX schema: their own op definitions check them when the graph is planned.
#pragma once

#include <string>

#include "model/ir.h"

namespace onyx {

// Throws when `version` is not an opset of `domain` ("" for ai.onnx) that ONNX defines; any
// version of a domain ONNX does not define passes.
void check_opset_import(const std::string& domain, int64_t version);

// Throws naming the rule when `node` (with its attributes and subgraphs converted) breaks the
// schema of its op at its opset. A node whose op has no schema at that opset passes: resolving
// the op refuses it later, with onyx's own words.
void check_node_schema(const Node& node);

// Throws when `inferred` contradicts the element type that the model declares for value `id`
// (a graph output, or a value_info entry), as onnxruntime and the ONNX checker refuse such a
// model. A declaration without an element type, or an undefined `inferred`, says nothing.
// Planning calls it for every node's inferred outputs, the stepping loop for those computed at run time.
void check_declared_dtype(const Graph& g, int id, DType inferred);

}  // namespace onyx
