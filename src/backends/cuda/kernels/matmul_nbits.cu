// com.microsoft MatMulNBits on CUDA (the CPU kernel, ops/matmul_nbits.cpp, is the reference):
// Y[M, N] = A[M, K] · dequant(B)^T, B's rows [N, k_blocks, blob] of `bits`-bit values in blocks
// of block_size, each block with a scale and a zero point.
//
// - 4 bits, up to 8 rows of A, K and block_size multiples of 32 (the builder's decoders at decode
//   time): each warp owns CPW output features and streams their packed rows 16 bytes (32 values,
//   one block's part) per lane with several loads in flight; a value becomes exactly q - z in
//   float by placing its 4 bits in a float's mantissa (2^23 + q) and subtracting 2^23 + z, so
//   each value costs a bit operation, a subtraction and its product; the block's scale multiplies
//   the lane's 32-value sum once. Its rows are prefetched into L2 before the kernel waits on the
//   kernel before it (kernels/common/pdl.cuh).
// - other bit widths and layouts, up to 8 rows: a warp per output feature, 4-byte words.
// - more rows of 16-bit A: B dequantized a chunk of rows at a time into the workspace, then
//   cuBLASLt; of float32 A: 64x64 tiles of Y with B dequantized into shared memory as loaded.
// All accumulate in float.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/common/convert.cuh"
#include "backends/cuda/kernels/common/launch.cuh"
#include "backends/cuda/kernels/common/pdl.cuh"
#include "backends/cuda/kernels/common/reduce.cuh"
#include "ops/block_quant.h"

namespace onyx::cuda {

namespace {

struct NBitsArgs {
  const void* a;  // [M, K]
  const uint8_t* b;  // [N, k_blocks, blob]
  const void* scales;  // [N, k_blocks]
  const void* zp;      // null: the default; packed uint8 or A's type
  int zp_packed;
  const void* bias;  // [N] or null
  void* y;           // [M, N]
  int64_t M, N, K, block, k_blocks, bits, zp_row;
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


// ---- 4 bits, few rows ----

constexpr int kNb4Warps = 4;

// R rows of A at most (the launch's rows may be fewer), CPW features per warp, U 16-byte loads
// per feature in flight per lane. kTypedZero: zero points of A's type, which may have a
// fraction (2^23 + z would round it), so q - z takes a second subtraction.
template <class T, int R, int CPW, int U, bool kTypedZero>
__global__ void __launch_bounds__(kNb4Warps * 32) nbits4_gemv_kernel(NBitsArgs p) {
  const int lane = threadIdx.x & 31;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kNb4Warps + (threadIdx.x >> 5)) * CPW;
  const int chunks = static_cast<int>(p.K / 32);          // 16-byte pieces of a row that hold values
  const int64_t row_bytes = p.k_blocks * p.block / 2;     // a multiple of 16 (block % 32 == 0)
  const int per_block = static_cast<int>(p.block / 32);   // pieces per quantization block
  const uint4* row[CPW];
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c) {
    const int64_t n = n0 + c < p.N ? n0 + c : p.N - 1;   // past the end: the last row again, never written
    row[c] = reinterpret_cast<const uint4*>(p.b + n * row_bytes);
  }
  if (lane == 0 && n0 < p.N)
    ONYX_UNROLL
    for (int c = 0; c < CPW; ++c) prefetch_l2(row[c], static_cast<uint32_t>(chunks) * 16u);
  wait_for_prior_grids();
  allow_dependent_grids();
  if (n0 >= p.N) return;
  const int rows = static_cast<int>(p.M < R ? p.M : R);
  const T* A = static_cast<const T*>(p.a);
  const T* scales = static_cast<const T*>(p.scales);
  float acc[CPW][R];
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c)
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) acc[c][r] = 0.f;
  for (int base = 0; base < chunks; base += 32 * U) {
    uint4 wv[U][CPW];
    ONYX_UNROLL
    for (int u = 0; u < U; ++u) {
      const int q = base + u * 32 + lane;
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c) {
        if (q < chunks) {
          asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
              : "=r"(wv[u][c].x), "=r"(wv[u][c].y), "=r"(wv[u][c].z), "=r"(wv[u][c].w)
              : "l"(row[c] + q));
        } else {
          wv[u][c] = make_uint4(0, 0, 0, 0);
        }
      }
    }
    ONYX_UNROLL
    for (int u = 0; u < U; ++u) {
      const int q = base + u * 32 + lane;
      if (q >= chunks) continue;
      const int64_t blk = q / per_block;
      float offset[CPW], scale[CPW];
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c) {
        const int64_t n = n0 + c < p.N ? n0 + c : p.N - 1;
        const float z = nbits_zero<T>(p, n, blk);
        offset[c] = kTypedZero ? z : 8388608.f + z;  // z, or 2^23 + z (exact for an integer z)
        scale[c] = to_compute(scales[n * p.k_blocks + blk]);
      }
      float dot[CPW][R];
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c)
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) dot[c][r] = 0.f;
      ONYX_UNROLL
      for (int s = 0; s < 4; ++s) {  // 8 values: one 32-bit word of each feature's piece
        float w[CPW][8];
        ONYX_UNROLL
        for (int c = 0; c < CPW; ++c) {
          const uint32_t word = s == 0 ? wv[u][c].x : s == 1 ? wv[u][c].y : s == 2 ? wv[u][c].z : wv[u][c].w;
          ONYX_UNROLL
          for (int i = 0; i < 8; ++i) {
            const float q = __uint_as_float(0x4B000000u | ((word >> (4 * i)) & 0xFu));  // 2^23 + q
            w[c][i] = kTypedZero ? (q - 8388608.f) - offset[c] : q - offset[c];
          }
        }
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) {
          if (r >= rows) continue;
          float x[8];
          pack_to_floats<T>(__ldg(reinterpret_cast<const uint4*>(A + r * p.K + q * 32 + s * 8)), x);
          ONYX_UNROLL
          for (int c = 0; c < CPW; ++c)
            ONYX_UNROLL
            for (int i = 0; i < 8; ++i) dot[c][r] = fmaf(x[i], w[c][i], dot[c][r]);
        }
      }
      ONYX_UNROLL
      for (int c = 0; c < CPW; ++c)
        ONYX_UNROLL
        for (int r = 0; r < R; ++r) acc[c][r] = fmaf(scale[c], dot[c][r], acc[c][r]);
    }
  }
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c)
    ONYX_UNROLL
    for (int r = 0; r < R; ++r)
      ONYX_UNROLL
      for (int o = 16; o > 0; o >>= 1) acc[c][r] += __shfl_xor_sync(0xffffffffu, acc[c][r], o);
  ONYX_UNROLL
  for (int c = 0; c < CPW; ++c)
    ONYX_UNROLL
    for (int r = 0; r < R; ++r) {
      const int64_t n = n0 + c;
      if (lane != c * R + r || n >= p.N || r >= rows) continue;
      const float bias = p.bias ? to_compute(static_cast<const T*>(p.bias)[n]) : 0.f;
      static_cast<T*>(p.y)[r * p.N + n] = from_compute<T>(acc[c][r] + bias);
    }
}

// Whether the 4-bit kernel takes this product: 16-bit A aligned to 16 bytes, K and the block a
// multiple of 32 (a 16-byte piece of a row lies in one block), at most 8 rows.
bool nbits4_fits(const NBitsArgs& p, DType a_dtype) {
  return p.bits == 4 && p.M >= 1 && p.M <= 8 && p.K % 32 == 0 && p.block % 32 == 0 &&
         (a_dtype == DType::kBFloat16 || a_dtype == DType::kFloat16) && is_aligned(p.a, 16) && is_aligned(p.b, 16) &&
         p.K / 32 <= (int64_t{1} << 30);
}

template <class T, int R, int CPW, int U>
void launch_nbits4(const NBitsArgs& p, CudaContext& cu) {
  const int64_t per_block = kNb4Warps * CPW;
  const unsigned blocks = static_cast<unsigned>((p.N + per_block - 1) / per_block);
  if (p.zp && !p.zp_packed)
    launch_kernel(nbits4_gemv_kernel<T, R, CPW, U, true>, blocks, kNb4Warps * 32, 0, cu, p);
  else
    launch_kernel(nbits4_gemv_kernel<T, R, CPW, U, false>, blocks, kNb4Warps * 32, 0, cu, p);
}

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
    CudaContext lt = cu;
    lt.workspace_bytes = kNbitsLtWorkspace;
    for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
      const int64_t rows = std::min(chunk, p.N - n0);
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

void run_matmul_nbits(KernelContext& ctx, CudaContext& cu) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
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
  p.scales = ctx.input(2).raw();
  if (ctx.has_input(3)) {
    p.zp = ctx.input(3).raw();
    p.zp_packed = ctx.input(3).dtype() == DType::kUInt8;
    p.zp_row = packed_bytes(p.k_blocks, p.bits);
  }
  p.bias = ctx.has_input(5) ? ctx.input(5).raw() : nullptr;
  Tensor& y = ctx.output(0);
  p.y = y.raw();
  if (p.M == 0) return;
  ONYX_CHECK(b.shape() == Shape({p.N, p.k_blocks, p.block * p.bits / 8}) || b.numel() == 0, "input 'B' must be [",
             p.N, ", ", p.k_blocks, ", ", p.block * p.bits / 8, "], got ", b.shape().str());
  dispatch_float(a.dtype(), "MatMulNBits", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (b.numel() == 0) {  // an omitted projection: the bias, or zeros
      launch_kernel(nbits_bias_kernel<T>, resident_blocks_for(p.M * p.N, cu.device), kThreads, 0, cu, p.bias, p.y, p.M,
                                                                                                    p.N);
      return;
    }
    if constexpr (!std::is_same_v<T, float>) {
      if (nbits4_fits(p, a.dtype())) {
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
    else if (!by_library<T>(p, a.dtype(), cu)) {
      ONYX_CHECK((p.M + kTileM - 1) / kTileM <= 65535, "MatMulNBits on CUDA: ", p.M, " rows exceed the grid");
      launch_kernel(nbits_gemm_kernel<T>, dim3(static_cast<unsigned>((p.N + kTileN - 1) / kTileN),
                                  static_cast<unsigned>((p.M + kTileM - 1) / kTileM)), 256, 0, cu, p);
    }
  });
  ONYX_CUDA_CHECK_LAUNCH("MatMulNBits");
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

}  // namespace

void register_matmul_nbits_kernels(CudaKernelRegistry& r) {
  r.add(domain_kernel("com.microsoft", "MatMulNBits", 1, run_matmul_nbits, nbits_support));
}

}  // namespace onyx::cuda
