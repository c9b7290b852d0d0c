// TensorProto -> Tensor (inline data, raw bytes, external data files).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "onyx/tensor.h"

namespace onnx {
class TensorProto;
}

namespace onyx {

class MappedFile;

struct TensorLoadContext {
  std::string base_dir;  // where external data paths are resolved
  // Set when the message is the loader's own (parsed from a file or bytes): its raw_data
  // strings are moved out of the message, each into a holder the tensor borrows from, so that
  // a weight's bytes go when its last tensor does (a packed weight's original, at load);
  // null means copy.
  std::shared_ptr<const void> proto_owner;
  // The holders by TensorProto, so that a proto converted twice gives the same bytes.
  std::unordered_map<const onnx::TensorProto*, std::shared_ptr<std::string>> moved;
  std::map<std::string, std::shared_ptr<MappedFile>> mapped;  // external files, opened once each
};

Tensor tensor_from_proto(const onnx::TensorProto& proto, TensorLoadContext& ctx);

}  // namespace onyx
