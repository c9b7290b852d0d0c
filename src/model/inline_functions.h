// Model-local functions (ModelProto.functions: what exporters such as torch.onnx's dynamo
// exporter and onnxscript emit for their modules) run as the nodes of their bodies: the
// loader replaces each call by a copy of the body, its formal inputs and outputs renamed to
// the call's values, its other values given names unique in the model, its attribute
// references (ref_attr_name) resolved to the call's attributes or the function's defaults.
// Calls inside bodies and inside subgraphs are inlined too; a function that calls itself,
// directly or not, is refused.
#pragma once

#include "onnx/onnx.pb.h"

namespace onyx {

// Inlines every call of mp's functions into its graph, adds the opsets the bodies import
// and clears mp.functions. Throws naming the function and the call on a bad body, a
// recursive call or a body importing an opset version other than the model's.
void inline_functions(onnx::ModelProto& mp);

}  // namespace onyx
