// float32 matrix products on the CPU: onyx's own kernels, vectorized for AVX-512 and AVX2
// (Highway, chosen at run time), split over the intra-op pool.
//
// The right-hand matrix is read from a packed form: panels of kPanel columns, each panel
// K rows of kPanel contiguous floats (columns past N zero). A weight is packed once, at load
// (passes/prepack.h); an activation operand is packed per call into per-thread scratch.
// One-row products (a decode step) stream the packed panels once, several at a time.
#pragma once

#include <cstdint>

#include "cpu/activation.h"

namespace onyx::cpu {

constexpr int64_t kPanel = 16;

// B's rows a tile accumulates over before it stores C (a product of more steps goes in blocks of
// K, C read back for each block after the first). Measured on one core of an AMD EPYC (Zen 4,
// 1 MiB L2) over the transformer shapes (197 or 128 rows by 768 -> 2304, 768, 3072 and
// 3072 -> 768), operands warm: 256 (a tile's B slice in L1) 38.7-39.3 ms in all, 384 37.8-37.9,
// 512 37.5-37.9, 768 36.9-37.2, 1024-3072 36.8-37.4: the slice streams from L2 as fast, and
// fewer passes over C pay.
constexpr int64_t kBlockK = 768;

// Floats of B's packed form: ceil(n / kPanel) * kPanel * k.
int64_t packed_size(int64_t k, int64_t n);

// Packs B (k x n): element (p, j) at b[p * ldb + j], or at b[j * ldb + p] when `trans`
// (B given as its n x k transpose).
void pack_b(const float* b, int64_t ldb, bool trans, int64_t k, int64_t n, float* packed);

// What a product does with its result before storing it:
//   C = act((C +) A B + bias[j] + row_bias[i] + residual[i, j]).
struct Epilogue {
  const float* bias = nullptr;      // n floats (one per column), or null
  const float* row_bias = nullptr;  // m floats (one per row: a convolution's channels), or null
  const float* residual = nullptr;  // m x n floats (row stride ldr) added before the activation, or null
  int64_t ldr = 0;
  Activation act;
  bool accumulate = false;  // add the product to C's values (before bias and act)
};

// C[m x n] (row stride ldc) = epilogue(A[m x k] (row stride lda) x B (packed)).
void gemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* packed_b, float* c,
                 int64_t ldc, const Epilogue& ep = {});

// gemm_packed with A column-major: element (i, p) at a[p * lda + i] (a convolution's image or
// im2col matrix as the left operand: its pixels the rows, its channels and taps the steps).
void gemm_packed_cols(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* packed_b, float* c,
                      int64_t ldc, const Epilogue& ep = {});

// Whether a convolution's m x k weights (per group) are better kept as the packed right-hand
// operand of Y^T = X^T W^T (gemm_packed_cols): from 4 MiB on (ResNet-50's last stage, whose 49
// pixels fill 49 of a tile's 64 columns and whose weights stream from memory), with m a
// multiple of kPanel (the packed form then holds exactly W's values).
bool conv_panels_pay(int64_t m, int64_t k);

// Whether they are better so, whatever their size, for a convolution known to write `pixels`
// pixels (0: not known): up to 64, with m a multiple of kPanel. 49 pixels fill 49 of the 64
// columns of Y = W X's four panels, where as Y^T's rows they fill tiles of rows; measured on one
// core of an AMD EPYC over 7 x 7 images: 1 x 1 convolutions of 160 -> 960, 960 -> 160 and
// 672 -> 160 channels 190, 196 and 138 us as Y = W X against 157, 140 and 99 in panels; over
// 14 x 14 (196 pixels) panels lost (112 -> 672: 303 against 356 us). Also up to 256 pixels where
// the weights pass 512 KiB (where Y = W X takes its blocks of K outermost) and the convolution
// reads at least twice the channels it writes (ResNet-50's 14 x 14 reductions): over 196 pixels,
// one core, thread CPU time, the product alone as Y = W X against in panels with the transposing
// copy, 1024 -> 256 channels 1142-1181 against 936-953 us, 1024 -> 512 2288 against 1888-1892;
// with k < m panels lost (256 -> 1024: 983-985 against 1094-1095), and over 784 pixels (512 -> 128:
// 923-924 against 954-957).
// mobilenet_v3's 14 x 14 reductions (480 or 672 -> 80 or 112, 154-301 KiB) gained 8-30 us each
// at one thread and lost at two on a busy machine: they stay as they were.
bool conv_panels_pay_for(int64_t m, int64_t k, int64_t pixels);

// C[m x n] = epilogue(A[m x k] x B) with B's row p read at b + koff[p]: element (p, j) is
// b[koff[p] + j]. Each row is read up to column n rounded up to kPanel (those extra values are
// not used, but must be readable). A stride-1 convolution reads its zero-padded image this
// way, row (c, ki, kj) at c's plane shifted by the tap, instead of an im2col copy.
void gemm_indirect(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, const int64_t* koff,
                   float* c, int64_t ldc, const Epilogue& ep = {});

// C = epilogue(op(A) op(B)), op a transposition or not, row-major operands, with no packed
// form: one-row products read B in place, others pack B per call.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float* c, int64_t ldc, const Epilogue& ep = {});

// The target the dispatched kernels run on ("AVX3", "AVX2", "EMU128", ...).
const char* simd_target();

// Tests only: restrict the dispatched kernels to the targets in `mask` (Highway's HWY_AVX2,
// HWY_AVX3, ...); 0 restores what the CPU supports.
void force_simd_targets_for_test(int64_t mask);

}  // namespace onyx::cpu
