// Element types. The numeric values are ONNX's TensorProto.DataType codes.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "onyx/error.h"

namespace onyx {

enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kComplex64 = 14,
  kComplex128 = 15,
  kBFloat16 = 16,
  // Narrow types: 8-bit floats, a 4-bit float and 4- and 2-bit integers. ONNX files pack the
  // sub-byte ones; onyx holds every narrow element in one byte of its own (the ints
  // sign-extended), as numpy's ml_dtypes does, and converts them with core/narrow_types.h.
  kFloat8E4M3FN = 17,
  kFloat8E4M3FNUZ = 18,
  kFloat8E5M2 = 19,
  kFloat8E5M2FNUZ = 20,
  kUInt4 = 21,
  kInt4 = 22,
  kFloat4E2M1 = 23,
  kFloat8E8M0 = 24,
  kUInt2 = 25,
  kInt2 = 26,
  // Values that are not tensors of numbers, held as tensors of objects (as strings are):
  // a sequence is a 1-D tensor of its element tensors; an optional is a 1-D tensor of 0
  // (none) or 1 element; a map is a 1-D tensor of 2: its keys and its values (1-D, one value
  // a key). Not ONNX element-type codes.
  kSequence = 1000,
  kOptional = 1001,
  kMap = 1002,
};

// IEEE binary16, stored as bits; arithmetic happens in float.
struct Float16 {
  uint16_t bits = 0;
  Float16() = default;
  explicit Float16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

// bfloat16: the upper half of a float32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<uint16_t>((u >> 16) | 0x40);  // keep NaN a quiet NaN
    } else {
      u += 0x7fffu + ((u >> 16) & 1u);
      bits = static_cast<uint16_t>(u >> 16);
    }
  }
  operator float() const {
    uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// Bytes per element; 0 for kString (stored as std::string objects) and undefined.
size_t dtype_size(DType t);
// ONNX-style name: "float32", "int64", "bfloat16", ...
std::string_view dtype_name(DType t);
// Whether onyx can hold tensors of this type.
bool dtype_supported(DType t);
// Converts an ONNX data-type code; throws for codes onyx does not support.
DType dtype_from_onnx(int32_t code);
bool dtype_is_float(DType t);    // float16, bfloat16, float32, float64
bool dtype_is_integer(DType t);  // signed or unsigned integers, not bool
bool dtype_is_signed(DType t);
// The 8-, 4- and 2-bit types above (one byte per element in memory).
bool dtype_is_narrow(DType t);
// Elements are C++ objects that storage constructs and destroys (strings, sequences,
// optionals): never raw arena bytes, never on a device.
bool dtype_is_object(DType t);

template <class T>
struct DTypeOf;
#define ONYX_DTYPE_OF(T, D) \
  template <>               \
  struct DTypeOf<T> {       \
    static constexpr DType value = D; \
  };
ONYX_DTYPE_OF(float, DType::kFloat32)
ONYX_DTYPE_OF(double, DType::kFloat64)
ONYX_DTYPE_OF(Float16, DType::kFloat16)
ONYX_DTYPE_OF(BFloat16, DType::kBFloat16)
ONYX_DTYPE_OF(int8_t, DType::kInt8)
ONYX_DTYPE_OF(int16_t, DType::kInt16)
ONYX_DTYPE_OF(int32_t, DType::kInt32)
ONYX_DTYPE_OF(int64_t, DType::kInt64)
ONYX_DTYPE_OF(uint8_t, DType::kUInt8)
ONYX_DTYPE_OF(uint16_t, DType::kUInt16)
ONYX_DTYPE_OF(uint32_t, DType::kUInt32)
ONYX_DTYPE_OF(uint64_t, DType::kUInt64)
ONYX_DTYPE_OF(bool, DType::kBool)
ONYX_DTYPE_OF(std::string, DType::kString)
#undef ONYX_DTYPE_OF

template <class T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

}  // namespace onyx
