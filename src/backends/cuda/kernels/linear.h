// What the linear kernels (linear.cu) expose besides their registration: a knob for the
// microbenchmark (bench/cuda_bench.cpp) that compares the streaming kernel's chunk sizes.
#pragma once

namespace onyx::cuda {

// The chunk of each weight row that one stage of the streaming kernel (one or two 16-bit rows of
// x) holds, in 16-byte packs: 64, 128 or 256; 0 restores the default. Process-wide; for
// measurements, not for serving.
void set_stream_chunk(int packs);

}  // namespace onyx::cuda
