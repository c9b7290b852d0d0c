// The two entry points of the CUDA backend, defined by src/backends/cuda/ when onyx is
// built with CUDA and by cuda_stub.cpp otherwise. Only device.cpp calls them.
#pragma once

#include <memory>
#include <string>

#include "backends/backend.h"

namespace onyx {

// How many CUDA devices this process can use; when none, `why` says why.
int cuda_device_count(std::string* why);
std::unique_ptr<Backend> make_cuda_backend(int index, const SessionOptions& options);

}  // namespace onyx
