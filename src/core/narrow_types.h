// The narrow element types (dtype_is_narrow): 8-bit floats (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz,
// the exponent-only e8m0), the 4-bit float e2m1, and 4- and 2-bit integers. onyx keeps one
// element per byte: the float codes as their bits, the integers as their value (int8 or uint8,
// sign-extended). These functions are the one place that knows what the codes mean.
#pragma once

#include <cstdint>
#include <string_view>

#include "onyx/dtype.h"

namespace onyx {

// Bits per element in an ONNX file: 8, 4 or 2.
int narrow_bits(DType t);
bool narrow_is_int(DType t);  // int4, uint4, int2, uint2

// The value of one element (NaN and infinities where the type has them).
double narrow_to_double(DType t, uint8_t byte);

// How a value between two powers of two becomes e8m0 (Cast's round_mode): the power above,
// the one below, or the nearest (decided on the float32 bits, as ONNX defines it).
enum class E8M0Round { kUp, kDown, kNearest };
E8M0Round parse_e8m0_round(std::string_view mode);

// The element nearest to v (round half to even) for the float types; with `saturate`,
// values beyond the largest finite one (infinities included) become it, else they become
// infinity or NaN as the type allows. float4e2m1 has neither and always saturates. For the
// integer types, v truncated toward zero, wrapped to the type's bits (as numpy's astype).
uint8_t narrow_from_double(DType t, double v, bool saturate = true, E8M0Round round = E8M0Round::kUp);
// An integer wrapped to the type's bits (the integer types only).
uint8_t narrow_from_int64(DType t, int64_t v);

// Packs `n` one-byte elements into ONNX's file layout (low bits first), and back. For 8-bit
// types both copy. `packed` holds narrow_packed_bytes(t, n) bytes.
void pack_narrow(DType t, const uint8_t* elements, int64_t n, uint8_t* packed);
void unpack_narrow(DType t, const uint8_t* packed, int64_t n, uint8_t* elements);
inline int64_t narrow_packed_bytes(DType t, int64_t n) {
  const int64_t per_byte = 8 / narrow_bits(t);
  return n / per_byte + (n % per_byte != 0);
}

}  // namespace onyx
