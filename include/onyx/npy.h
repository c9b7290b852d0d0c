// Reading and writing NumPy .npy files (format versions 1-3, C order).
#pragma once

#include <string>

#include "onyx/tensor.h"

namespace onyx {

// Throws onyx::Error naming the file and what is wrong with it.
Tensor read_npy(const std::string& path);
// bfloat16 has no .npy type and is written as float32; strings are not supported.
void write_npy(const std::string& path, const Tensor& t);

}  // namespace onyx
