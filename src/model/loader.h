// Loading ONNX files into onyx's IR.
#pragma once

#include <string>

#include "model/ir.h"

namespace onyx {

// Reads, parses and validates an ONNX model. Initializers stored in the file are
// borrowed from the parsed message (no second copy); external data files are
// memory-mapped. Errors name the file and, inside it, the graph, node or tensor.
Model load_model(const std::string& path);
// The same from bytes already in memory; `base_dir` resolves external data paths.
Model load_model_from_bytes(const void* data, size_t size, const std::string& name, const std::string& base_dir);

// Reads a serialized TensorProto (the .pb files of the ONNX backend tests).
Tensor load_tensor_proto_file(const std::string& path);
// Reads a serialized SequenceProto (kind kSequence) or OptionalProto (kOptional) into a
// sequence or optional value; any other kind reads a TensorProto.
Tensor load_value_proto_file(const std::string& path, DType kind);

}  // namespace onyx
