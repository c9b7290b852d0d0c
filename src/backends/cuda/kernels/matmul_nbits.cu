// com.microsoft MatMulNBits on CUDA (the CPU kernel, ops/matmul_nbits.cpp, is the reference):
// Y[M, N] = A[M, K] · dequant(B)^T, B's rows [N, k_blocks, blob] of `bits`-bit values in blocks
// of block_size, each block with a scale and a zero point.
//
// - 4 bits, up to 8 rows of 16-bit A (the decoders at decode time; kernels/nbits4.cuh), on tensor
//   cores: the streaming kernel (tiles of 16 or 32 weight rows brought into shared memory by the
//   bulk-copy engine, one block per SM) where K is a multiple of 128 and of the block and every
//   copy of scales is whole 16-byte runs; else the tensor-core kernel (each warp loads its rows'
//   16-byte parts itself). Zero points of A's type: the per-value float kernel, each warp owning
//   CPW output features and streaming their packed rows 16 bytes (32 values, one block's part) per
//   lane; a value becomes exactly q - z in float by placing its 4 bits in a float's mantissa
//   (2^23 + q) and subtracting 2^23 + z. The weights are asked for before the kernel waits on the
//   kernel before it (kernels/common/pdl.cuh).
// - other bit widths and layouts, up to 8 rows: a warp per output feature, 4-byte words.
// - more rows of 16-bit A: B dequantized a chunk of rows at a time into the workspace, then
//   cuBLASLt; of float32 A: 64x64 tiles of Y with B dequantized into shared memory as loaded.
// All accumulate in float.
#include <mutex>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/common/bulk_copy.cuh"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/gate.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/mma.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "backends/cuda/kernels/norm.h"
#include "ops/block_quant.h"
#include "ops/gate_activation.h"

namespace onyx::cuda {

int nbits4_variant_for_bench = 0;

namespace {

constexpr int kNbitsMaxSplits = 8;

struct NBitsArgs {
  const void* a;  // [M, K]
  const uint8_t* b;  // [N, k_blocks, blob]
  const void* scales;  // [N, k_blocks]
  const void* zp;      // null: the default; packed uint8 or A's type
  int zp_packed;
  const void* bias;  // [N] or null
  void* y;           // [M, N]
  int64_t M, N, K, block, k_blocks, bits, zp_row;
  // The tensor-core kernel's outputs (onyx::LinearNBits): Y's columns cut at split_end into
  // out[] (MatMulNBits: one output, y), or with `gated` act(Y[:, :N/2]) * Y[:, N/2:] into out[0]
  // (act: SiLU, or the GELU `act` numbers as common/gate.cuh does).
  int splits;
  int64_t split_end[kNbitsMaxSplits];
  void* out[kNbitsMaxSplits];
  int gated;
  int act;
  // onyx::RmsNormLinearNBits: A is h = a + skip (skip may be null), normalized by its root mean
  // square and scaled by gamma into shared memory first; block 0 writes h to sum (when not null).
  const void* skip;
  const void* gamma;
  void* sum;
  float eps;
  uint32_t magic;  // the 4-bit kernels' Nb4Magic<T>::kBits (nb4_mma_slice says why it is an argument)
};

template <class T>
__device__ __forceinline__ float nbits_zero(const NBitsArgs& p, int64_t n, int64_t blk) {
  if (!p.zp) return static_cast<float>(1 << (p.bits - 1));
  if (p.zp_packed) {
    const int64_t per_byte = 8 / p.bits;
    const uint8_t byte = static_cast<const uint8_t*>(p.zp)[n * p.zp_row + blk / per_byte];
    return static_cast<float>((byte >> ((blk % per_byte) * p.bits)) & ((1 << p.bits) - 1));
  }
  return to_compute(static_cast<const T*>(p.zp)[n * p.k_blocks + blk]);
}

// Up to MR rows of A: a warp per output feature n; each lane takes 4-byte words of the
// feature's packed row in turn (a word never straddles a block: blobs are >= 4 bytes).
template <class T, int MR>
__global__ void __launch_bounds__(256) nbits_gemv_kernel(NBitsArgs p) {
  ONYX_KERNEL_PROLOGUE();
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + (threadIdx.x >> 5);
  if (n >= p.N) return;
  const T* A = static_cast<const T*>(p.a);
  const int64_t blob = p.block * p.bits / 8, per_word = 32 / p.bits, mask = (1 << p.bits) - 1;
  const int64_t words = p.k_blocks * blob / 4;
  const uint32_t* row = reinterpret_cast<const uint32_t*>(p.b + n * p.k_blocks * blob);
  float acc[MR];
  ONYX_UNROLL
  for (int m = 0; m < MR; ++m) acc[m] = 0.f;
  for (int64_t w = lane; w < words; w += 32) {
    const uint32_t word = __ldg(row + w);
    const int64_t k0 = w * per_word, blk = k0 / p.block;
    const float scale = to_compute(static_cast<const T*>(p.scales)[n * p.k_blocks + blk]);
    const float zero = nbits_zero<T>(p, n, blk);
    for (int64_t i = 0; i < per_word; ++i) {
      const int64_t k = k0 + i;
      if (k >= p.K) break;
      const float wv = (static_cast<float>((word >> (i * p.bits)) & mask) - zero) * scale;
      ONYX_UNROLL
      for (int m = 0; m < MR; ++m)
        if (m < p.M) acc[m] += to_compute(A[m * p.K + k]) * wv;
    }
  }
  ONYX_UNROLL
  for (int m = 0; m < MR; ++m) {
    const float s = warp_reduce(acc[m], [](float x, float y) { return x + y; });
    if (lane == 0 && m < p.M) {
      const float bias = p.bias ? to_compute(static_cast<const T*>(p.bias)[n]) : 0.f;
      static_cast<T*>(p.y)[m * p.N + n] = from_compute<T>(s + bias);
    }
  }
}

// 64x64 tiles of Y, 256 threads of 4x4 outputs each, K in steps of 16; B's tile is
// dequantized into shared memory as it is loaded.
constexpr int kTileM = 64, kTileN = 64, kTileK = 16;

template <class T>
__global__ void __launch_bounds__(256) nbits_gemm_kernel(NBitsArgs p) {
  ONYX_KERNEL_PROLOGUE();
  __shared__ float As[kTileK][kTileM + 1];
  __shared__ float Bs[kTileK][kTileN + 1];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTileM, n0 = static_cast<int64_t>(blockIdx.x) * kTileN;
  const T* A = static_cast<const T*>(p.a);
  const int64_t blob = p.block * p.bits / 8, mask = (1 << p.bits) - 1;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < p.K; k0 += kTileK) {
    for (int e = threadIdx.x; e < kTileK * kTileM; e += blockDim.x) {
      const int kk = e % kTileK, mm = e / kTileK;
      const int64_t m = m0 + mm, k = k0 + kk;
      As[kk][mm] = m < p.M && k < p.K ? to_compute(A[m * p.K + k]) : 0.f;
    }
    for (int e = threadIdx.x; e < kTileK * kTileN; e += blockDim.x) {
      const int kk = e % kTileK, nn = e / kTileK;
      const int64_t n = n0 + nn, k = k0 + kk;
      float wv = 0.f;
      if (n < p.N && k < p.K) {
        const int64_t blk = k / p.block, i = k % p.block;
        const uint8_t* bb = p.b + (n * p.k_blocks + blk) * blob;
        const int64_t per_byte = 8 / p.bits;
        const int q = (bb[i / per_byte] >> ((i % per_byte) * p.bits)) & mask;
        wv = (static_cast<float>(q) - nbits_zero<T>(p, n, blk)) *
             to_compute(static_cast<const T*>(p.scales)[n * p.k_blocks + blk]);
      }
      Bs[kk][nn] = wv;
    }
    __syncthreads();
    ONYX_UNROLL
    for (int kk = 0; kk < kTileK; ++kk) {
      float av[4], bv[4];
      ONYX_UNROLL
      for (int i = 0; i < 4; ++i) {
        av[i] = As[kk][ty * 4 + i];
        bv[i] = Bs[kk][tx * 4 + i];
      }
      ONYX_UNROLL
      for (int i = 0; i < 4; ++i)
        ONYX_UNROLL
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const int64_t m = m0 + ty * 4 + i, n = n0 + tx * 4 + j;
      if (m >= p.M || n >= p.N) continue;
      const float bias = p.bias ? to_compute(static_cast<const T*>(p.bias)[n]) : 0.f;
      static_cast<T*>(p.y)[m * p.N + n] = from_compute<T>(acc[i][j] + bias);
    }
}

}  // namespace
}  // namespace onyx::cuda

// The 4-bit kernels of few rows (nbits4.cuh): what the products of decode steps run on.
#include "backends/cuda/kernels/nbits4.cuh"

namespace onyx::cuda {
namespace {

template <class T>
__global__ void nbits_bias_kernel(const void* bias, void* y, int64_t M, int64_t N) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < M * N;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x)
    static_cast<T*>(y)[e] = bias ? static_cast<const T*>(bias)[e % N] : from_compute<T>(0.f);
}

// Many rows of A (prompts, large batches): a chunk of B's rows at a time dequantized into the
// workspace past cuBLASLt's part, then multiplied by cuBLASLt (tensor cores) into Y's columns of
// that chunk, the bias in its epilogue. 16-bit A only (float32 keeps the tiled kernel).
template <class T>
__global__ void nbits_dequant_kernel(NBitsArgs p, int64_t n0, int64_t rows, T* out) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t total = rows * p.K, blob = p.block * p.bits / 8, per_byte = 8 / p.bits, mask = (1 << p.bits) - 1;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / p.K, k = e - r * p.K, n = n0 + r, blk = k / p.block, i = k - blk * p.block;
    const uint8_t byte = p.b[(n * p.k_blocks + blk) * blob + i / per_byte];
    const float q = static_cast<float>((byte >> ((i % per_byte) * p.bits)) & mask);
    out[e] = from_compute<T>((q - nbits_zero<T>(p, n, blk)) *
                             to_compute(static_cast<const T*>(p.scales)[n * p.k_blocks + blk]));
  }
}

// The same for 4-bit B with K and the block multiples of 32 (onnxruntime-genai's int4 models):
// a thread per 32 values of a row (one 16-byte load of packed values, one scale and zero point,
// four 16-byte stores), its row found by one division. The per-value kernel above divides
// 64-bit indices for every value; with it a 4-bit 1.24B Llama decoding 32 rows took 10.1 ms a
// step on an H100, with this one 4.8 (bf16: 2.3; docs/decode-speed.md).
template <class T>
__global__ void nbits4_dequant_kernel(NBitsArgs p, int64_t n0, int64_t rows, T* out) {
  ONYX_KERNEL_PROLOGUE();
  const int64_t groups = p.K / 32, total = rows * groups, row_bytes = p.k_blocks * (p.block / 2);
  const T* scales = static_cast<const T*>(p.scales);
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / groups, k0 = (e - r * groups) * 32, n = n0 + r, blk = k0 / p.block;
    const uint4 packed = *reinterpret_cast<const uint4*>(p.b + n * row_bytes + k0 / 2);
    const float zero = nbits_zero<T>(p, n, blk), scale = to_compute(scales[n * p.k_blocks + blk]);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    uint4* dst = reinterpret_cast<uint4*>(out + r * p.K + k0);
    ONYX_UNROLL
    for (int w = 0; w < 4; ++w) {
      uint4 o;
      T* v = reinterpret_cast<T*>(&o);
      ONYX_UNROLL
      for (int i = 0; i < 8; ++i)  // value 2j is byte j's low nibble
        v[i] = from_compute<T>((static_cast<float>((words[w] >> (4 * i)) & 15u) - zero) * scale);
      dst[w] = o;
    }
  }
}

constexpr size_t kNbitsLtWorkspace = 8ull << 20;  // of the workspace: cuBLASLt's

template <class T>
bool by_library(const NBitsArgs& p, DType dt, CudaContext& cu) {
  if constexpr (std::is_same_v<T, float>) {
    return false;
  } else {
    const size_t row_bytes = static_cast<size_t>(p.K) * sizeof(T);
    if (cu.workspace_bytes <= kNbitsLtWorkspace + row_bytes) return false;
    const int64_t chunk = static_cast<int64_t>((cu.workspace_bytes - kNbitsLtWorkspace) / row_bytes);
    T* dense = reinterpret_cast<T*>(static_cast<char*>(cu.workspace) + kNbitsLtWorkspace);
    const bool fast = p.bits == 4 && p.K % 32 == 0 && p.block % 32 == 0 && is_aligned(p.b, 16) && is_aligned(dense, 16);
    CudaContext lt = cu;
    lt.workspace_bytes = kNbitsLtWorkspace;
    for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
      const int64_t rows = std::min(chunk, p.N - n0);
      if (fast)
        launch_kernel(nbits4_dequant_kernel<T>, resident_blocks_for(rows * p.K / 32, cu.device), kThreads, 0, cu, p, n0,
                      rows, dense);
      else
        launch_kernel(nbits_dequant_kernel<T>, resident_blocks_for(rows * p.K, cu.device), kThreads, 0, cu, p, n0, rows,
                      dense);
      ONYX_CUDA_CHECK_LAUNCH("MatMulNBits (dequantize)");
      GemmCall g;
      g.dtype = dt;
      g.tb = true;
      g.m = p.M;
      g.n = rows;
      g.k = p.K;
      g.lda = p.K;
      g.ldb = p.K;
      g.ldd = p.N;
      g.a = p.a;
      g.b = dense;
      g.d = static_cast<T*>(p.y) + n0;
      g.bias = p.bias ? static_cast<const T*>(p.bias) + n0 : nullptr;
      run_gemm(g, lt, cat("MatMulNBits [", p.M, ", ", p.K, "] x ", p.N, " outputs"));
    }
    return true;
  }
}

// The arguments of a MatMulNBits, LinearNBits or RmsNormLinearNBits node (Y and the outputs
// left to the caller): A is input 0, B, the scales and the zero points inputs from `first_b` on.
NBitsArgs nbits_args(KernelContext& ctx, size_t first_b = 1) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(first_b);
  NBitsArgs p{};
  p.K = ctx.attr_int("K");
  p.N = ctx.attr_int("N");
  p.block = ctx.attr_int("block_size");
  p.bits = ctx.attr_int("bits", 4);
  check_quant_bits(p.bits);
  check_quant_block_size(p.block);
  p.k_blocks = (p.K + p.block - 1) / p.block;
  p.M = a.numel() / p.K;
  p.a = a.raw();
  p.b = b.data<uint8_t>();
  p.scales = ctx.input(first_b + 1).raw();
  if (ctx.num_inputs() > first_b + 2 && ctx.has_input(first_b + 2)) {
    p.zp = ctx.input(first_b + 2).raw();
    p.zp_packed = ctx.input(first_b + 2).dtype() == DType::kUInt8;
    p.zp_row = packed_bytes(p.k_blocks, p.bits);
  }
  ONYX_CHECK(b.shape() == Shape({p.N, p.k_blocks, p.block * p.bits / 8}) || b.numel() == 0, "input 'B' must be [",
             p.N, ", ", p.k_blocks, ", ", p.block * p.bits / 8, "], got ", b.shape().str());
  return p;
}

// Y = A dequant(B)^T (+ bias) into p.y [M, N], by the kernel that fits.
template <class T>
void nbits_product(NBitsArgs p, DType dt, CudaContext& cu) {
  if constexpr (!std::is_same_v<T, float>) {
    p.splits = 1;
    p.split_end[0] = p.N;
    p.out[0] = p.y;
    p.gated = 0;
    if (nbits4_fits(p, dt)) {
      if (!(p.zp && !p.zp_packed) && nbits4_variant_for_bench != 1) {
        if ((nbits4_variant_for_bench == 0 || nbits4_variant_for_bench >= 9) && nbits4_stream_fits(p))
          run_nbits4_stream<T>(p, cu);
        else run_nbits4_mma<T>(p, cu);
        return;
      }
      if (p.M == 1) launch_nbits4<T, 1, 2, 8>(p, cu);
      else if (p.M == 2) launch_nbits4<T, 2, 2, 8>(p, cu);
      else if (p.M <= 4) launch_nbits4<T, 4, 4, 2>(p, cu);
      else launch_nbits4<T, 8, 4, 2>(p, cu);
      return;
    }
  }
  const unsigned warps_blocks = static_cast<unsigned>((p.N + 7) / 8);
  if (p.M == 1)
    launch_kernel(nbits_gemv_kernel<T, 1>, warps_blocks, 256, 0, cu, p);
  else if (p.M <= 4)
    launch_kernel(nbits_gemv_kernel<T, 4>, warps_blocks, 256, 0, cu, p);
  else if (p.M <= 8)
    launch_kernel(nbits_gemv_kernel<T, 8>, warps_blocks, 256, 0, cu, p);
  else if (!by_library<T>(p, dt, cu)) {
    ONYX_CHECK((p.M + kTileM - 1) / kTileM <= 65535, "MatMulNBits on CUDA: ", p.M, " rows exceed the grid");
    launch_kernel(nbits_gemm_kernel<T>, dim3(static_cast<unsigned>((p.N + kTileN - 1) / kTileN),
                                             static_cast<unsigned>((p.M + kTileM - 1) / kTileM)),
                  256, 0, cu, p);
  }
}

void run_matmul_nbits(KernelContext& ctx, CudaContext& cu) {
  NBitsArgs p = nbits_args(ctx);
  p.bias = ctx.has_input(5) ? ctx.input(5).raw() : nullptr;
  p.y = ctx.output(0).raw();
  if (p.M == 0) return;
  const DType dt = ctx.input(0).dtype();
  dispatch_float(dt, "MatMulNBits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (ctx.input(1).numel() == 0) {  // an omitted projection: the bias, or zeros
      launch_kernel(nbits_bias_kernel<T>, resident_blocks_for(p.M * p.N, cu.device), kThreads, 0, cu, p.bias, p.y, p.M,
                    p.N);
      return;
    }
    nbits_product<T>(p, dt, cu);
  });
  ONYX_CUDA_CHECK_LAUNCH("MatMulNBits");
}

template <class T>
__global__ void nbits_gate_kernel(const T* __restrict__ d, T* __restrict__ y, int64_t rows, int64_t f, int act) {
  ONYX_KERNEL_PROLOGUE();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * f;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i - r * f;
    const float g = to_compute(d[r * 2 * f + j]);
    y[i] = from_compute<T>(gated_value(g, to_compute(d[r * 2 * f + f + j]), act));
  }
}

// The rows [first, first + count) of B, its scales and zero points: a product of its own.
NBitsArgs feature_rows(NBitsArgs p, int64_t first, int64_t count, size_t es) {
  const int64_t row_bytes = p.k_blocks * p.block * p.bits / 8;
  p.b += first * row_bytes;
  p.scales = static_cast<const char*>(p.scales) + first * p.k_blocks * es;
  if (p.zp) p.zp = static_cast<const char*>(p.zp) + (p.zp_packed ? first * p.zp_row : first * p.k_blocks * es);
  p.N = count;
  return p;
}

// onyx::LinearNBits: up to 8 rows of 16-bit A (decode) in one launch of the tensor-core kernel,
// the outputs cut or gated as it writes them; otherwise (prompts, other layouts) each output's
// weight rows as a product of their own, and the gated form a chunk of rows at a time into the
// last quarter of the workspace, then gated. `widths`: the outputs' columns (p.out[i] each).
template <class T>
void linear_nbits(NBitsArgs p, const std::vector<int64_t>& widths, DType dt, CudaContext& cu) {
  const size_t es = sizeof(T);
  if (!std::is_same_v<T, float> && nbits4_fits(p, dt) && !(p.zp && !p.zp_packed) &&
      widths.size() <= static_cast<size_t>(kNbitsMaxSplits) && nbits4_variant_for_bench != 1) {
    // The norm's rows are read 16 bytes at a time.
    const bool norm_aligned = !p.gamma || (is_aligned(p.gamma, 16) && (!p.skip || is_aligned(p.skip, 16)) &&
                                           (!p.sum || is_aligned(p.sum, 16)));
    if constexpr (!std::is_same_v<T, float>) {
      if (norm_aligned && (nbits4_variant_for_bench == 0 || nbits4_variant_for_bench >= 9) && nbits4_stream_fits(p)) {
        run_nbits4_stream<T>(p, cu);
        return;
      }
      if (norm_aligned && (!p.gamma || (p.M <= kNbitsNormInKernelRows &&
                                        static_cast<size_t>(p.M * p.K) * es <= kNbitsNormSmem))) {
        run_nbits4_mma<T>(p, cu);
        return;
      }
    }
  }
  if (p.gamma) {  // the rows normalized into the workspace's third quarter, a chunk at a time
    const size_t row = static_cast<size_t>(p.K) * es, room = cu.workspace_bytes / 4;
    ONYX_CHECK(room >= row, "RmsNormLinearNBits: a row (", row, " bytes) does not fit a quarter of the ",
               cu.workspace_bytes, "-byte workspace");
    const int64_t chunk = static_cast<int64_t>(room / row);
    CudaContext rest = cu;
    rest.workspace_bytes = (cu.workspace_bytes - room) & ~size_t{255};
    char* normed = static_cast<char*>(cu.workspace) + rest.workspace_bytes;
    for (int64_t r0 = 0; r0 < p.M; r0 += chunk) {
      NBitsArgs q = p;
      q.M = std::min(chunk, p.M - r0);
      const size_t at = static_cast<size_t>(r0 * p.K) * es;
      rms_norm_rows(dt, static_cast<const char*>(p.a) + at, p.skip ? static_cast<const char*>(p.skip) + at : nullptr,
                    p.gamma, normed, p.sum ? static_cast<char*>(p.sum) + at : nullptr, q.M, p.K, p.eps, cu);
      q.a = normed;
      q.gamma = q.skip = nullptr;
      q.sum = nullptr;
      for (size_t i = 0; i < widths.size(); ++i) q.out[i] = static_cast<T*>(p.out[i]) + r0 * widths[i];
      linear_nbits<T>(q, widths, dt, rest);
    }
    return;
  }
  if (!p.gated) {
    int64_t first = 0;
    for (size_t i = 0; i < widths.size(); ++i) {
      NBitsArgs q = feature_rows(p, first, widths[i], es);
      q.y = p.out[i];
      nbits_product<T>(q, dt, cu);
      first += widths[i];
    }
    return;
  }
  const int64_t f = p.N / 2;
  const size_t row = static_cast<size_t>(p.N) * es, room = cu.workspace_bytes / 4;
  ONYX_CHECK(room >= row, "LinearNBits: a row of the gated product (", row, " bytes) does not fit a quarter of the ",
             cu.workspace_bytes, "-byte workspace");
  const int64_t chunk = static_cast<int64_t>(room / row);
  CudaContext rest = cu;
  rest.workspace_bytes = (cu.workspace_bytes - room) & ~size_t{255};
  T* scratch = reinterpret_cast<T*>(static_cast<char*>(cu.workspace) + rest.workspace_bytes);
  for (int64_t r0 = 0; r0 < p.M; r0 += chunk) {
    NBitsArgs q = p;
    q.M = std::min(chunk, p.M - r0);
    q.a = static_cast<const char*>(p.a) + static_cast<size_t>(r0 * p.K) * es;
    q.y = scratch;
    nbits_product<T>(q, dt, rest);
    launch_kernel(nbits_gate_kernel<T>, resident_blocks_for(q.M * f, cu.device), kThreads, 0, cu, scratch,
                  static_cast<T*>(p.out[0]) + r0 * f, q.M, f, p.act);
  }
}

// LinearNBits' outputs (from `first_output` on) into p; their widths.
std::vector<int64_t> nbits_outputs(KernelContext& ctx, NBitsArgs& p, size_t first_output) {
  p.gated = ctx.attr_int("gated", 0) != 0;
  p.act = p.gated ? static_cast<int>(gate_activation_of(ctx.attr_string("activation", "silu"))) : 0;
  p.splits = static_cast<int>(ctx.num_outputs() - first_output);
  ONYX_CHECK(p.splits <= kNbitsMaxSplits || !p.gated, "a gated product has one output");
  std::vector<int64_t> widths;
  int64_t end = 0;
  for (size_t i = first_output; i < ctx.num_outputs(); ++i) {
    Tensor& y = ctx.output(i);
    widths.push_back(y.shape()[y.rank() - 1]);
    end += p.gated ? p.N : widths.back();
    if (widths.size() <= static_cast<size_t>(kNbitsMaxSplits)) {
      p.split_end[widths.size() - 1] = end;
      p.out[widths.size() - 1] = y.raw();
    }
  }
  return widths;
}

void run_linear_nbits(KernelContext& ctx, CudaContext& cu) {
  NBitsArgs p = nbits_args(ctx);
  if (p.M == 0) return;
  ONYX_CHECK(ctx.input(1).numel() > 0, "LinearNBits: B is empty");
  ONYX_CHECK(ctx.num_outputs() <= static_cast<size_t>(kNbitsMaxSplits), "LinearNBits on CUDA: at most ",
             kNbitsMaxSplits, " outputs, got ", ctx.num_outputs());
  const std::vector<int64_t> widths = nbits_outputs(ctx, p, 0);
  const DType dt = ctx.input(0).dtype();
  dispatch_float(dt, "LinearNBits", [&](auto tag) { linear_nbits<typename decltype(tag)::type>(p, widths, dt, cu); });
  ONYX_CUDA_CHECK_LAUNCH("LinearNBits");
}

// RmsNormLinearNBits: x, skip?, gamma, B, scales, zero_points? -> (sum?, y...).
void run_rms_norm_linear_nbits(KernelContext& ctx, CudaContext& cu) {
  NBitsArgs p = nbits_args(ctx, 3);
  if (p.M == 0) return;
  ONYX_CHECK(ctx.input(3).numel() > 0, "RmsNormLinearNBits: B is empty");
  ONYX_CHECK(ctx.num_outputs() <= static_cast<size_t>(kNbitsMaxSplits) + 1, "RmsNormLinearNBits on CUDA: at most ",
             kNbitsMaxSplits, " product outputs");
  ONYX_CHECK(ctx.input(2).numel() == p.K, "gamma must hold K = ", p.K, " values, got ", ctx.input(2).shape().str());
  p.skip = ctx.has_input(1) ? ctx.input(1).raw() : nullptr;
  p.gamma = ctx.input(2).raw();
  p.sum = ctx.has_output(0) ? ctx.output(0).raw() : nullptr;
  p.eps = ctx.attr_float("epsilon", 1e-5f);
  const std::vector<int64_t> widths = nbits_outputs(ctx, p, 1);
  const DType dt = ctx.input(0).dtype();
  dispatch_float(dt, "RmsNormLinearNBits",
                 [&](auto tag) { linear_nbits<typename decltype(tag)::type>(p, widths, dt, cu); });
  ONYX_CUDA_CHECK_LAUNCH("RmsNormLinearNBits");
}

std::string nbits_support(const Node& node, const std::vector<ValueType>& in) {
  NodeView n(node);
  if (in.empty() || !is_cuda_float(in[0].dtype)) return "MatMulNBits on CUDA takes float32/float16/bfloat16 A";
  if (n.attr_int("weight_prepacked", 0) != 0) return "weight_prepacked B is not supported by onyx";
  const int64_t bits = n.attr_int("bits", 4), block = n.attr_int("block_size", 0);
  if (bits != 2 && bits != 4 && bits != 8) return "MatMulNBits on CUDA takes 2, 4 or 8 bits";
  if (block < 16 || (block & (block - 1)) != 0) return "MatMulNBits block_size must be a power of two >= 16";
  if (node.inputs.size() > 4 && node.inputs[4] >= 0) return "MatMulNBits on CUDA does not take g_idx";
  for (size_t i : {size_t{2}, size_t{5}})
    if (i < in.size() && node.inputs[i] >= 0 && in[i].dtype != in[0].dtype)
      return "MatMulNBits: scales and bias must have A's dtype";
  if (in.size() > 3 && node.inputs[3] >= 0 && in[3].dtype != DType::kUInt8 && in[3].dtype != in[0].dtype)
    return "MatMulNBits: zero_points must be uint8 or A's dtype";
  return "";
}

std::string rms_norm_linear_nbits_support(const Node& node, const std::vector<ValueType>& in) {
  if (in.size() < 5 || !is_cuda_float(in[0].dtype)) return "RmsNormLinearNBits on CUDA takes float32/float16/bfloat16 x";
  for (size_t i : {size_t{1}, size_t{2}, size_t{4}})
    if (node.inputs[i] >= 0 && in[i].dtype != in[0].dtype) return "RmsNormLinearNBits: skip, gamma and scales must have x's dtype";
  if (in.size() > 5 && node.inputs[5] >= 0 && in[5].dtype != DType::kUInt8 && in[5].dtype != in[0].dtype)
    return "RmsNormLinearNBits: zero_points must be uint8 or x's dtype";
  NodeView n(node);
  const int64_t bits = n.attr_int("bits", 4), block = n.attr_int("block_size", 0);
  if (bits != 2 && bits != 4 && bits != 8) return "RmsNormLinearNBits on CUDA takes 2, 4 or 8 bits";
  if (block < 16 || (block & (block - 1)) != 0) return "RmsNormLinearNBits block_size must be a power of two >= 16";
  if (n.attr_int("gated", 0) != 0 && n.attr_int("N", 0) % 2 != 0) return "a gated RmsNormLinearNBits needs an even N";
  return "";
}

std::string linear_nbits_support(const Node& node, const std::vector<ValueType>& in) {
  std::string why = nbits_support(node, in);
  if (!why.empty()) return why;
  NodeView n(node);
  if (n.attr_int("gated", 0) != 0 && n.attr_int("N", 0) % 2 != 0) return "a gated LinearNBits needs an even N";
  return "";
}

}  // namespace

void register_matmul_nbits_kernels(CudaKernelRegistry& r) {
  r.add(domain_kernel("com.microsoft", "MatMulNBits", 1, run_matmul_nbits, nbits_support));
  r.add(domain_kernel("onyx", "LinearNBits", 1, run_linear_nbits, linear_nbits_support));
  r.add(domain_kernel("onyx", "RmsNormLinearNBits", 1, run_rms_norm_linear_nbits, rms_norm_linear_nbits_support));
}

}  // namespace onyx::cuda
