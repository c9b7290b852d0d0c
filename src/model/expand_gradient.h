// ai.onnx.preview.training's Gradient node computes the derivatives of one value of its graph
// (attribute y) with respect to others (xs). onyx runs it as ordinary ops: the loader replaces
// each Gradient node by the reverse-mode chain of its graph's nodes between xs and y, seeded
// with dy/dy = 1, each forward op contributing its local derivative, contributions to one
// value added, each summed back over the axes its value was broadcast along.
//
// The ops it differentiates are the elementwise ones: Add, Sub, Mul, Div, Neg, Identity, Exp,
// Log, Sqrt, Tanh, Sigmoid, Relu. A Gradient through anything else is refused, naming the node.
// An x that y does not depend on gets zeros.
#pragma once

#include "model/ir.h"

namespace onyx {

// Expands the Gradient nodes of g (not of its subgraphs: the loader calls it per graph).
// `onnx_opset` is the model's ai.onnx opset, for the ops it emits. Returns whether g changed
// (its nodes then need sorting again).
bool expand_gradients(Graph& g, int onnx_opset);

}  // namespace onyx
