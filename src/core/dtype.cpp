#include "onyx/dtype.h"

#include <cmath>

#include "onyx/tensor.h"

namespace onyx {

uint16_t Float16::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (mag < 0x38800000u) {
    // Subnormal half (or zero): shift the implicit-one mantissa, round to nearest even.
    if (mag < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = mag >> 23;
    uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rem > midpoint || (rem == midpoint && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((mag >> 13) - (112u << 10));
  uint32_t rem = mag & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float Float16::to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      float f = std::ldexp(static_cast<float>(mant), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32: case DType::kInt32: case DType::kUInt32: return 4;
    case DType::kFloat64: case DType::kInt64: case DType::kUInt64: case DType::kComplex64: return 8;
    case DType::kComplex128: return 16;
    case DType::kFloat16: case DType::kBFloat16: case DType::kInt16: case DType::kUInt16: return 2;
    case DType::kInt8: case DType::kUInt8: case DType::kBool: return 1;
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2: case DType::kFloat8E5M2FNUZ:
    case DType::kUInt4: case DType::kInt4: case DType::kFloat4E2M1: case DType::kFloat8E8M0: case DType::kUInt2:
    case DType::kInt2: return 1;  // one element a byte in memory, packed only in files
    case DType::kString: return sizeof(std::string);
    case DType::kSequence: case DType::kOptional: case DType::kMap: return sizeof(Tensor);
    case DType::kUndefined: return 0;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kUndefined: return "undefined";
    case DType::kFloat32: return "float32";
    case DType::kUInt8: return "uint8";
    case DType::kInt8: return "int8";
    case DType::kUInt16: return "uint16";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kString: return "string";
    case DType::kBool: return "bool";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "float64";
    case DType::kUInt32: return "uint32";
    case DType::kUInt64: return "uint64";
    case DType::kComplex64: return "complex64";
    case DType::kComplex128: return "complex128";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat8E4M3FN: return "float8e4m3fn";
    case DType::kFloat8E4M3FNUZ: return "float8e4m3fnuz";
    case DType::kFloat8E5M2: return "float8e5m2";
    case DType::kFloat8E5M2FNUZ: return "float8e5m2fnuz";
    case DType::kUInt4: return "uint4";
    case DType::kInt4: return "int4";
    case DType::kFloat4E2M1: return "float4e2m1";
    case DType::kFloat8E8M0: return "float8e8m0";
    case DType::kUInt2: return "uint2";
    case DType::kInt2: return "int2";
    case DType::kSequence: return "sequence";
    case DType::kOptional: return "optional";
    case DType::kMap: return "map";
  }
  return "unknown";
}

bool dtype_supported(DType t) {
  return t != DType::kUndefined && t != DType::kComplex64 && t != DType::kComplex128;
}

DType dtype_from_onnx(int32_t code) {
  if (code >= 1 && code <= 26 && code != 14 && code != 15) return static_cast<DType>(code);
  if (code == 14 || code == 15)
    throw Error(cat("element type ", dtype_name(static_cast<DType>(code)), " is not supported by onyx"));
  throw Error(cat("unknown ONNX element type code ", code));
}

bool dtype_is_float(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 || t == DType::kBFloat16;
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64:
    case DType::kUInt8: case DType::kUInt16: case DType::kUInt32: case DType::kUInt64: return true;
    default: return false;
  }
}

bool dtype_is_narrow(DType t) {
  const auto c = static_cast<int32_t>(t);
  return c >= 17 && c <= 26;
}

bool dtype_is_object(DType t) {
  return t == DType::kString || t == DType::kSequence || t == DType::kOptional || t == DType::kMap;
}

bool dtype_is_signed(DType t) {
  switch (t) {
    case DType::kInt8: case DType::kInt16: case DType::kInt32: case DType::kInt64: return true;
    default: return dtype_is_float(t);
  }
}

}  // namespace onyx
