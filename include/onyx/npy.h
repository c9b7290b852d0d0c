// Reading and writing NumPy .npy files (format versions 1-3, C order).
#pragma once

#include <string>

#include "onyx/tensor.h"

namespace onyx {

// Throws onyx::Error naming the file and what is wrong with it.
Tensor read_npy(const std::string& path);
// bfloat16 and the narrow types (float8, int4, ...) have no .npy type and are written as float32;
// strings are not supported.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace onyx
