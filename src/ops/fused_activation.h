// The activation a fused node (onyx::DenseMatMul, onyx::FusedConv) applies to its result, read
// from its attributes: activation (a name, "" for none), alpha and beta (its parameters).
#pragma once

#include <string>

#include "cpu/activation.h"
#include "ops/op.h"

namespace onyx {

// Throws naming the unknown activation.
cpu::Activation parse_activation(const std::string& name, float alpha, float beta);
cpu::Activation parse_activation_attrs(const NodeView& node);

}  // namespace onyx
