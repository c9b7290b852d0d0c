// Broadcast geometry for the CUDA kernels, passed to kernels by value: the k-way numpy
// broadcast of several inputs onto an output (elementwise ops), and one small operand
// (a scale, a bias, a skip) broadcast onto a larger target (normalizations).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "onyx/error.h"
#include "onyx/shape.h"
#include "backends/cuda/kernels/common/launch.cuh"

namespace onyx::cuda {

// Output dims and per-input element strides after merging adjacent axes that
// broadcast alike, innermost axis first; stride 0 where an input broadcasts.
template <int K>
struct Broadcast {
  int rank = 1;
  int64_t dims[kMaxRank] = {};
  int64_t strides[K][kMaxRank] = {};
};

// Builds the geometry for inputs that broadcast (numpy rules) to `out`.
template <int K>
Broadcast<K> make_broadcast(const Shape& out, const std::array<const Shape*, K>& ins) {
  const size_t r = out.rank();
  std::vector<int64_t> dims;                 // outermost first
  std::vector<std::array<bool, K>> bcast;    // per kept axis: does input k broadcast there
  for (size_t d = 0; d < r; ++d) {
    if (out[d] == 1) continue;  // size-1 output axes carry no index
    std::array<bool, K> b{};
    for (int k = 0; k < K; ++k) {
      const Shape& s = *ins[k];
      ONYX_CHECK(s.rank() <= r, "input of shape ", s.str(), " does not broadcast to ", out.str());
      const size_t off = r - s.rank();
      const int64_t in_dim = d < off ? 1 : s[d - off];
      ONYX_CHECK(in_dim == 1 || in_dim == out[d], "input of shape ", s.str(), " does not broadcast to ",
                 out.str());
      b[k] = in_dim == 1;
    }
    if (!dims.empty() && bcast.back() == b) {
      dims.back() *= out[d];
    } else {
      dims.push_back(out[d]);
      bcast.push_back(b);
    }
  }
  Broadcast<K> g;
  if (dims.empty()) {  // one element: every input reads its element 0
    g.rank = 1;
    g.dims[0] = 1;
    return g;
  }
  ONYX_CHECK(dims.size() <= static_cast<size_t>(kMaxRank), "broadcast to ", out.str(), " needs ", dims.size(),
             " axes after merging; the CUDA kernels handle at most ", kMaxRank);
  g.rank = static_cast<int>(dims.size());
  for (int k = 0; k < K; ++k) {
    int64_t acc = 1;
    for (int j = g.rank - 1, idx = 0; j >= 0; --j, ++idx) {
      g.dims[idx] = dims[j];
      g.strides[k][idx] = bcast[j][k] ? 0 : acc;
      if (!bcast[j][k]) acc *= dims[j];
    }
  }
  return g;
}

// Element offsets of each input for flat output index i. I is uint32_t when
// the output has at most 2^31 - 1 elements (cheap division), else int64_t.
template <class I, int K>
__host__ __device__ __forceinline__ void broadcast_offsets(const Broadcast<K>& g, I i, I (&off)[K]) {
  ONYX_UNROLL
  for (int k = 0; k < K; ++k) off[k] = 0;
  ONYX_UNROLL
  for (int d = 0; d < kMaxRank; ++d) {
    if (d == g.rank - 1) {  // outermost axis: what remains of i is its index
      ONYX_UNROLL
      for (int k = 0; k < K; ++k) off[k] += i * static_cast<I>(g.strides[k][d]);
      break;
    }
    const I dim = static_cast<I>(g.dims[d]);
    const I q = i / dim;
    const I rem = i - q * dim;
    ONYX_UNROLL
    for (int k = 0; k < K; ++k) off[k] += rem * static_cast<I>(g.strides[k][d]);
    i = q;
  }
}

// ---- one operand broadcast onto a target ----

// mode 0: same layout as the target; 1: index % n (a suffix of the target's
// dims, a scalar when n == 1); 2: general (per-dim strides, 0 on broadcast dims).
struct OperandBroadcast {
  int mode = 0;
  int rank = 0;
  int64_t n = 1;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
};

__device__ __forceinline__ int64_t operand_index(const OperandBroadcast& b, int64_t i) {
  if (b.mode == 0) return i;
  if (b.mode == 1) return i % b.n;
  int64_t off = 0;
  for (int a = b.rank - 1; a >= 0; --a) {
    const int64_t c = i % b.dims[a];
    i /= b.dims[a];
    off += c * b.strides[a];
  }
  return off;
}

// How `src` (unidirectionally broadcastable to `target`) maps onto target indices.
inline OperandBroadcast make_operand_broadcast(const Shape& src, const Shape& target, const char* what) {
  const size_t sr = src.rank(), tr = target.rank();
  ONYX_CHECK(sr <= tr, what, " of shape ", src.str(), " does not broadcast to ", target.str());
  for (size_t i = 0; i < sr; ++i) {
    const int64_t s = src[sr - 1 - i], t = target[tr - 1 - i];
    ONYX_CHECK(s == t || s == 1, what, " of shape ", src.str(), " does not broadcast to ", target.str());
  }
  OperandBroadcast b;
  b.n = src.numel();
  if (b.n == target.numel()) return b;  // equal up to leading ones
  // Strip the source's leading ones; a suffix of the target's dims means "i % n".
  size_t lead = 0;
  while (lead < sr && src[lead] == 1) ++lead;
  bool suffix = true;
  for (size_t i = lead; i < sr; ++i) suffix = suffix && src[i] == target[tr - sr + i];
  if (suffix) {
    b.mode = 1;
    return b;
  }
  ONYX_CHECK(tr <= static_cast<size_t>(kMaxRank), what, ": broadcasting to rank ", tr,
             " is supported up to rank ", kMaxRank, " on CUDA");
  b.mode = 2;
  b.rank = static_cast<int>(tr);
  int64_t stride = 1;
  for (size_t i = tr; i-- > 0;) {
    b.dims[i] = target[i];
    const size_t k = i + sr;  // source axis = k - tr, when k >= tr
    if (k >= tr && src[k - tr] != 1) {
      b.strides[i] = stride;
      stride *= src[k - tr];
    } else {
      b.strides[i] = 0;
    }
  }
  return b;
}

}  // namespace onyx::cuda
