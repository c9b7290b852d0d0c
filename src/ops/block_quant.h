// The block-quantized weight formats of com.microsoft's MatMulNBits and
// GatherBlockQuantized: unsigned values of 2, 4 or 8 bits packed into bytes, the
// first value in the lowest bits; each block of `block_size` values along one axis
// has a scale and a zero point, and a value dequantizes to (q - zero_point) * scale.
#pragma once

#include <cstdint>

#include "onyx/error.h"

namespace onyx {

// The quantized widths these formats take.
inline void check_quant_bits(int64_t bits) {
  ONYX_CHECK(bits == 2 || bits == 4 || bits == 8, "bits must be 2, 4 or 8, got ", bits);
}

// block_size: a power of two, at least 16.
inline void check_quant_block_size(int64_t block_size) {
  ONYX_CHECK(block_size >= 16 && (block_size & (block_size - 1)) == 0,
             "block_size must be a power of two and at least 16, got ", block_size);
}

// Bytes that hold `count` values of `bits` bits.
inline int64_t packed_bytes(int64_t count, int64_t bits) { return (count * bits + 7) / 8; }

// Value i of a packed run of `bits`-bit values.
inline int packed_value(const uint8_t* bytes, int64_t i, int64_t bits) {
  const int64_t per_byte = 8 / bits;
  const int shift = static_cast<int>((i % per_byte) * bits);
  return (bytes[i / per_byte] >> shift) & ((1 << bits) - 1);
}

// The zero point used when none is given: the middle of the unsigned range.
inline int default_zero_point(int64_t bits) { return 1 << (bits - 1); }

}  // namespace onyx
