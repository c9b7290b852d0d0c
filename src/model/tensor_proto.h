// TensorProto -> Tensor (inline data, raw bytes, external data files).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "onyx/tensor.h"

namespace onnx {
class TensorProto;
}

namespace onyx {

class MappedFile;

struct TensorLoadContext {
  std::string base_dir;  // where external data paths are resolved
  // Owns the message whose raw_data bytes may be borrowed; null means copy.
  std::shared_ptr<const void> proto_owner;
  std::map<std::string, std::shared_ptr<MappedFile>> mapped;  // external files, opened once each
};

Tensor tensor_from_proto(const onnx::TensorProto& proto, TensorLoadContext& ctx);

}  // namespace onyx
