// The geometry of a com.microsoft MultiHeadAttention call: its attributes and the sizes its
// input shapes give, checked once here and shared by shape inference and every backend's
// kernel (as ops/gqa.h for GroupQueryAttention). The semantics are onnxruntime's CPU
// kernel's, as observed by running it; the kernel's file (multi_head_attention.cpp)
// describes them.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op.h"

namespace onyx {

namespace mha {

enum Input : size_t {
  kQuery,
  kKey,
  kValue,
  kBias,
  kKeyPaddingMask,
  kAttentionBias,
  kPastKey,
  kPastValue,
  kPastSequenceLength,
  kCacheIndirection,
  kNumInputs,
};

// "query", "key", ... by Input.
const char* input_name(size_t i);

}  // namespace mha

struct MhaAttrs {
  int64_t num_heads = 0;
  double scale = 0;  // 0: 1/sqrt(head_size)
  double mask_filter_value = -10000;
  bool unidirectional = false;
};

// Reads and checks the attributes.
MhaAttrs mha_attrs(const NodeView& n);

// The sizes of one call, from the input shapes (null: input absent).
struct MhaGeometry {
  int64_t B = 0, S = 0, L = 0, N = 0, H = 0, Hv = 0, P = 0;
  bool kv_bnsh = false;  // key/value given as [B, N, L, H]
  int64_t T() const { return P + L; }
};

// Throws, naming the input, for a form onyx does not take or shapes that do not fit.
MhaGeometry mha_geometry(const MhaAttrs& a, const std::vector<const Shape*>& in);

// Checks the inputs' dtypes (kUndefined: input absent), naming the input that is wrong.
void check_mha_dtypes(const std::vector<DType>& dt);

}  // namespace onyx
