// What the linear kernels (linear.cu) expose besides their registration: a knob for the
// microbenchmark (bench/cuda_bench.cpp) that compares two ways of feeding the streaming kernel.
#pragma once

namespace onyx::cuda {

// The streaming kernel (one or two 16-bit rows of x) asks the copy engine for each weight row's
// chunk from one thread in turn (true), or by the lanes of a warp, a whole-row tile as one copy
// (false, the default). Process-wide; for measurements, not for serving.
void set_stream_serial_issue(bool serial);

}  // namespace onyx::cuda
