#include "core/narrow_types.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace onyx {

namespace {

// A small float format: `exp_bits` exponent bits with `bias`, `man_bits` mantissa bits.
// `fnuz`: no negative zero and no infinity, NaN is the sign bit alone. `max_code` is the
// positive code of the largest finite value; positive codes 0..max_code rise with value.
struct MiniFloat {
  int exp_bits, man_bits, bias;
  uint8_t max_code;
  bool fnuz, has_inf;
  uint8_t nan_code;
  int sign_shift() const { return exp_bits + man_bits; }
};

const MiniFloat& format_of(DType t) {
  static const MiniFloat e4m3fn{4, 3, 7, 0x7e, false, false, 0x7f};
  static const MiniFloat e4m3fnuz{4, 3, 8, 0x7f, true, false, 0x80};
  static const MiniFloat e5m2{5, 2, 15, 0x7b, false, true, 0x7f};
  static const MiniFloat e5m2fnuz{5, 2, 16, 0x7f, true, false, 0x80};
  // e2m1 has no NaN; numpy's ml_dtypes (the ONNX reference) turns NaN into the code 0b1000.
  static const MiniFloat e2m1{2, 1, 1, 0x7, false, false, 0x8};
  switch (t) {
    case DType::kFloat8E4M3FN: return e4m3fn;
    case DType::kFloat8E4M3FNUZ: return e4m3fnuz;
    case DType::kFloat8E5M2: return e5m2;
    case DType::kFloat8E5M2FNUZ: return e5m2fnuz;
    case DType::kFloat4E2M1: return e2m1;
    default: throw Error(cat("element type ", dtype_name(t), " is not a small float type"));
  }
}

// The magnitude of a positive code, read as a normal or subnormal number with no special
// values (the encoder also reads max_code + 1 this way, as the step past the largest value).
double magnitude(const MiniFloat& f, unsigned code) {
  const unsigned exp = code >> f.man_bits, man = code & ((1u << f.man_bits) - 1);
  const double frac = static_cast<double>(man) / static_cast<double>(1u << f.man_bits);
  if (exp == 0) return std::ldexp(frac, 1 - f.bias);
  return std::ldexp(1.0 + frac, static_cast<int>(exp) - f.bias);
}

double minifloat_to_double(const MiniFloat& f, uint8_t code) {
  const uint8_t sign = static_cast<uint8_t>(1u << f.sign_shift());
  const uint8_t mag = code & static_cast<uint8_t>(sign - 1);
  if (f.fnuz && code == f.nan_code) return std::numeric_limits<double>::quiet_NaN();
  if (!f.fnuz && mag > f.max_code) {
    if (f.has_inf && mag == f.max_code + 1) return (code & sign) ? -INFINITY : INFINITY;  // e5m2's 0x7c
    return std::numeric_limits<double>::quiet_NaN();
  }
  const double v = magnitude(f, mag);
  return (code & sign) ? -v : v;
}

uint8_t minifloat_from_double(const MiniFloat& f, double v, bool saturate) {
  const uint8_t sign = static_cast<uint8_t>(1u << f.sign_shift());
  if (std::isnan(v)) return f.nan_code;
  const bool negative = std::signbit(v);
  const double a = std::fabs(v);
  const bool e2m1 = f.sign_shift() == 3;
  auto overflow = [&]() -> uint8_t {
    if (saturate || e2m1) return static_cast<uint8_t>((negative ? sign : 0) | f.max_code);
    if (f.has_inf) return static_cast<uint8_t>((negative ? sign : 0) | (f.max_code + 1));
    return f.nan_code;
  };
  if (std::isinf(a)) return overflow();
  // The largest code whose magnitude is <= a, then round half to even against the next.
  unsigned lo = 0, hi = f.max_code;
  if (a >= magnitude(f, hi)) {
    lo = hi;
  } else {
    while (hi - lo > 1) {
      unsigned mid = (lo + hi) / 2;
      (magnitude(f, mid) <= a ? lo : hi) = mid;
    }
  }
  unsigned code = lo;
  const double below = magnitude(f, lo), above = magnitude(f, lo + 1);
  if (a > below) {
    const double d_lo = a - below, d_hi = above - a;
    if (d_hi < d_lo || (d_hi == d_lo && (lo & 1u))) code = lo + 1;
  }
  if (code > f.max_code) return overflow();
  if (code == 0 && f.fnuz) return 0;  // no negative zero: the sign bit alone is NaN
  return static_cast<uint8_t>((negative ? sign : 0) | code);
}

// e8m0: 2^(code - 127), 0xff NaN; made from the float32 bits of v as ONNX defines it.
uint8_t e8m0_from_double(double v, bool saturate, E8M0Round round) {
  const float f = static_cast<float>(v);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t exp = (bits >> 23) & 0xffu;
  if (exp == 0xffu) return 0xff;  // NaN and infinities
  bool up = false;
  if (round == E8M0Round::kUp) {
    up = (bits & 0x7fffffu) != 0;
  } else if (round == E8M0Round::kNearest) {
    const bool guard = bits & 0x400000u, rest = bits & 0x200000u, sticky = bits & 0x1fffffu;
    up = guard && (rest || sticky || exp > 0);
  }
  if (up && saturate && exp == 0xfeu) up = false;
  return static_cast<uint8_t>(exp + (up ? 1u : 0u));
}

}  // namespace

int narrow_bits(DType t) {
  switch (t) {
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2: case DType::kFloat8E5M2FNUZ:
    case DType::kFloat8E8M0: return 8;
    case DType::kFloat4E2M1: case DType::kInt4: case DType::kUInt4: return 4;
    case DType::kInt2: case DType::kUInt2: return 2;
    default: throw Error(cat("element type ", dtype_name(t), " is not a narrow type"));
  }
}

bool narrow_is_int(DType t) {
  return t == DType::kInt4 || t == DType::kUInt4 || t == DType::kInt2 || t == DType::kUInt2;
}

double narrow_to_double(DType t, uint8_t byte) {
  switch (t) {
    case DType::kInt4: case DType::kInt2: return static_cast<int8_t>(byte);
    case DType::kUInt4: case DType::kUInt2: return byte;
    case DType::kFloat8E8M0:
      return byte == 0xff ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int{byte} - 127);
    default: return minifloat_to_double(format_of(t), byte);
  }
}

E8M0Round parse_e8m0_round(std::string_view mode) {
  if (mode == "up") return E8M0Round::kUp;
  if (mode == "down") return E8M0Round::kDown;
  if (mode == "nearest") return E8M0Round::kNearest;
  throw Error(cat("round_mode must be \"up\", \"down\" or \"nearest\", got \"", mode, "\""));
}

uint8_t narrow_from_int64(DType t, int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  switch (t) {
    case DType::kUInt4: return static_cast<uint8_t>(u & 0xfu);
    case DType::kUInt2: return static_cast<uint8_t>(u & 0x3u);
    case DType::kInt4: return static_cast<uint8_t>(static_cast<int8_t>(((u & 0xfu) ^ 0x8u)) - 8);
    case DType::kInt2: return static_cast<uint8_t>(static_cast<int8_t>(((u & 0x3u) ^ 0x2u)) - 2);
    default: throw Error(cat("element type ", dtype_name(t), " is not a narrow integer type"));
  }
}

uint8_t narrow_from_double(DType t, double v, bool saturate, E8M0Round round) {
  if (narrow_is_int(t)) {
    // Truncation toward zero; NaN and values beyond int64 take x86's "integer indefinite"
    // (INT64_MIN), whose low bits are 0, as a C cast would.
    const int64_t i = v > -9223372036854775808.0 && v < 9223372036854775808.0 ? static_cast<int64_t>(v)
                                                                              : std::numeric_limits<int64_t>::min();
    return narrow_from_int64(t, i);
  }
  if (t == DType::kFloat8E8M0) return e8m0_from_double(v, saturate, round);
  return minifloat_from_double(format_of(t), v, saturate);
}

void pack_narrow(DType t, const uint8_t* elements, int64_t n, uint8_t* packed) {
  const int bits = narrow_bits(t);
  if (bits == 8) {
    if (n) std::memcpy(packed, elements, static_cast<size_t>(n));
    return;
  }
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  std::memset(packed, 0, static_cast<size_t>(narrow_packed_bytes(t, n)));
  for (int64_t i = 0; i < n; ++i)
    packed[i / per_byte] |= static_cast<uint8_t>((elements[i] & mask) << (bits * (i % per_byte)));
}

void unpack_narrow(DType t, const uint8_t* packed, int64_t n, uint8_t* elements) {
  const int bits = narrow_bits(t);
  if (bits == 8) {
    if (n) std::memcpy(elements, packed, static_cast<size_t>(n));
    return;
  }
  const int per_byte = 8 / bits;
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  const bool sign_extend = t == DType::kInt4 || t == DType::kInt2;
  for (int64_t i = 0; i < n; ++i) {
    uint8_t v = (packed[i / per_byte] >> (bits * (i % per_byte))) & mask;
    elements[i] = sign_extend ? narrow_from_int64(t, v) : v;
  }
}

}  // namespace onyx
