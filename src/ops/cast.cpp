// Cast and CastLike between every pair of onyx's element types, strings included.
#include <cctype>
#include <cstring>
#include <charconv>
#include <cstdlib>
#include <map>

#include "core/narrow_types.h"
#include "ops/elementwise.h"

namespace onyx {

namespace {

// numpy's str() layout (what the ONNX reference's astype(str) gives) for a
// number given as its shortest significant digits and decimal exponent (value
// = d.ddd x 10^exp): positional "1.0", "0.0001", "123.5" or scientific "1e-05",
// "1.5e+16". The caller decides which, from the value.
std::string layout_decimal(bool negative, bool positional, const std::string& digits, int exp) {
  std::string s = negative ? "-" : "";
  const int n = static_cast<int>(digits.size());
  if (!positional) {
    s.push_back(digits[0]);
    if (n > 1) s.append(".").append(digits, 1);
    char buf[16];
    std::snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    return s.append(buf);
  }
  if (exp < 0) return s.append("0.").append(static_cast<size_t>(-exp - 1), '0').append(digits);
  if (n <= exp + 1) return s.append(digits).append(static_cast<size_t>(exp + 1 - n), '0').append(".0");
  return s.append(digits, 0, exp + 1).append(".").append(digits, exp + 1);
}

// Splits "d.ddde+XX" (std::to_chars scientific) into digits and exponent.
std::string format_scientific(bool negative, bool positional, const char* first, const char* last) {
  std::string text(first, last);
  size_t e = text.find('e');
  std::string mantissa = text.substr(0, e);
  int exp = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (char c : mantissa)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  return layout_decimal(negative, positional, digits, exp);
}

// Shortest digits that read back as the same value of T, in numpy's layout:
// positional for 1e-4 <= |x| < 10^P, with P = 16 for double, 6 for float and
// 3 for the 16-bit floats (numpy 2: str(np.float32(1e6)) is "1e+06").
template <class T>
std::string float_to_string(T v) {
  const double d = static_cast<double>(static_cast<compute_t<T>>(v));
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  const bool negative = std::signbit(d);
  char buf[64];
  if (d == 0) return negative ? "-0.0" : "0.0";
  const double max_positional = std::is_same_v<T, double> ? 1e16 : std::is_same_v<T, float> ? 1e6 : 1e3;
  const bool positional = std::abs(d) >= 1e-4 && std::abs(d) < max_positional;
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    auto res = std::to_chars(buf, buf + sizeof buf, std::abs(v), std::chars_format::scientific);
    return format_scientific(negative, positional, buf, res.ptr);
  } else {
    // 16-bit floats: the fewest significant digits that round-trip.
    const float f = std::abs(static_cast<float>(v));
    for (int precision = 0; precision < 9; ++precision) {
      auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific, precision);
      float back = std::strtof(std::string(buf, res.ptr).c_str(), nullptr);
      if (T(back).bits == T(f).bits) return format_scientific(negative, positional, buf, res.ptr);
    }
    auto res = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
    return format_scientific(negative, positional, buf, res.ptr);
  }
}

template <class S>
std::string to_string_value(const S& v) {
  if constexpr (std::is_same_v<S, std::string>) return v;
  else if constexpr (std::is_same_v<S, bool>) return v ? "True" : "False";
  else if constexpr (is_int_v<S>) return std::to_string(v);
  else return float_to_string(v);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses a floating value the way Python's float() does ("1.5", "-INF", "nan", "1e5").
bool parse_double(std::string_view text, double& out) {
  std::string s(trim(text));
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size();
}

template <class D>
D parse_value(const std::string& text) {
  std::string_view s = trim(text);
  if constexpr (std::is_same_v<D, bool>) {
    if (s.empty() || s == "false" || s == "False" || s == "FALSE") return false;
    if (s == "true" || s == "True" || s == "TRUE") return true;
  } else if constexpr (is_int_v<D>) {
    if (!s.empty() && s.front() == '+') s.remove_prefix(1);
    using Wide = std::conditional_t<std::is_signed_v<D>, int64_t, uint64_t>;
    Wide w{};
    auto res = std::from_chars(s.data(), s.data() + s.size(), w);
    if (res.ec == std::errc() && res.ptr == s.data() + s.size()) return static_cast<D>(w);
  }
  double d;
  ONYX_CHECK(parse_double(s, d), "cannot convert the string \"", text, "\" to ", dtype_name(dtype_of<D>));
  return convert_value<D>(d);
}

template <class D, class S>
D cast_value(const S& s) {
  if constexpr (std::is_same_v<D, std::string>) return to_string_value(s);
  else if constexpr (std::is_same_v<S, std::string>) return parse_value<D>(s);
  else return convert_value<D>(s);
}

// How a cast to a narrow float treats values out of its range (Cast's saturate, opset 19)
// and how e8m0 rounds (round_mode, opset 24).
struct NarrowOptions {
  bool saturate = true;
  E8M0Round round = E8M0Round::kUp;
};

NarrowOptions narrow_options(const NodeView& node) {
  NarrowOptions o;
  if (node.opset() >= 19) o.saturate = node.attr_int("saturate", 1) != 0;
  if (node.opset() >= 24) o.round = parse_e8m0_round(node.attr_string("round_mode", "up"));
  return o;
}

void cast_tensor(const Tensor& in, Tensor& out, const NarrowOptions& opts = {});

// Narrow types go through an exact wide type: their values as int64 or float32, then the
// ordinary cast; into a narrow type, each value is encoded from its int64 or double value.
void cast_narrow(const Tensor& in, Tensor& out, const NarrowOptions& opts) {
  const int64_t n = in.numel();
  if (dtype_is_narrow(in.dtype())) {
    Tensor wide(narrow_is_int(in.dtype()) ? DType::kInt64 : DType::kFloat32, in.shape());
    const auto* p = static_cast<const uint8_t*>(in.raw());
    for (int64_t i = 0; i < n; ++i) {
      if (wide.dtype() == DType::kInt64) wide.data<int64_t>()[i] = static_cast<int64_t>(narrow_to_double(in.dtype(), p[i]));
      else wide.data<float>()[i] = static_cast<float>(narrow_to_double(in.dtype(), p[i]));
    }
    cast_tensor(wide, out, opts);
    return;
  }
  const DType to = out.dtype();
  auto* q = static_cast<uint8_t*>(out.raw());
  if (in.dtype() == DType::kString) {
    for (int64_t i = 0; i < n; ++i) q[i] = narrow_from_double(to, parse_value<double>(in.data<std::string>()[i]),
                                                               opts.saturate, opts.round);
  } else if (narrow_is_int(to) && !dtype_is_float(in.dtype())) {
    for (int64_t i = 0; i < n; ++i) q[i] = narrow_from_int64(to, in.get_as_int64(i));
  } else {
    for (int64_t i = 0; i < n; ++i) q[i] = narrow_from_double(to, in.get_as_double(i), opts.saturate, opts.round);
  }
}

void cast_tensor(const Tensor& in, Tensor& out, const NarrowOptions& opts) {
  if (dtype_is_narrow(in.dtype()) || dtype_is_narrow(out.dtype())) return cast_narrow(in, out, opts);
  dispatch<AllTypes>(in.dtype(), "Cast input", [&](auto src_tag) {
    using S = typename decltype(src_tag)::type;
    dispatch<AllTypes>(out.dtype(), "Cast target", [&](auto dst_tag) {
      using D = typename decltype(dst_tag)::type;
      map_unary<S, D>(in, out, [](const S& x) { return cast_value<D>(x); });
    });
  });
}

// Cast-1 named the target type with a string ("FLOAT"); later opsets use the code.
DType cast_target(const NodeView& node) {
  const Attribute* a = node.node().find_attribute("to");
  ONYX_CHECK(a, "required attribute 'to' is missing");
  if (a->kind == Attribute::Kind::kString) {
    static const std::map<std::string, DType> kNames = {
        {"FLOAT", DType::kFloat32}, {"UINT8", DType::kUInt8},     {"INT8", DType::kInt8},
        {"UINT16", DType::kUInt16}, {"INT16", DType::kInt16},     {"INT32", DType::kInt32},
        {"INT64", DType::kInt64},   {"STRING", DType::kString},   {"BOOL", DType::kBool},
        {"FLOAT16", DType::kFloat16}, {"DOUBLE", DType::kFloat64}, {"UINT32", DType::kUInt32},
        {"UINT64", DType::kUInt64}, {"BFLOAT16", DType::kBFloat16}};
    auto it = kNames.find(a->s);
    ONYX_CHECK(it != kNames.end(), "attribute 'to' names an unknown element type \"", a->s, "\"");
    return it->second;
  }
  return dtype_from_onnx(static_cast<int32_t>(node.attr_int("to")));
}

// ---- BitCast (opset 26): the same bits read as another type of the same width ----

int bit_width(DType t) { return dtype_is_narrow(t) ? narrow_bits(t) : static_cast<int>(8 * dtype_size(t)); }

void infer_bitcast(InferContext& ctx) {
  const DType from = ctx.input_dtype(0);
  const DType to = dtype_from_onnx(static_cast<int32_t>(ctx.attr_int("to")));
  ONYX_CHECK(from != DType::kString && to != DType::kString, "BitCast does not take strings");
  ONYX_CHECK(bit_width(from) == bit_width(to), "BitCast needs types of one width: ", dtype_name(from), " has ",
             bit_width(from), " bits, ", dtype_name(to), " ", bit_width(to));
  ctx.set_output(0, to, ctx.input_shape(0));
}

void bitcast_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  if (x.bytes()) std::memcpy(y.raw(), x.raw(), x.bytes());
  const int bits = bit_width(x.dtype());
  if (bits >= 8) return;
  // Sub-byte elements: onyx holds the narrow integers sign-extended, so the bits are the low
  // ones of each byte, and a signed target extends them again.
  auto* p = static_cast<uint8_t*>(y.raw());
  const uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  const bool sign = y.dtype() == DType::kInt4 || y.dtype() == DType::kInt2;
  for (int64_t i = 0; i < y.numel(); ++i) {
    const uint8_t b = p[i] & mask;
    p[i] = sign ? narrow_from_int64(y.dtype(), b) : b;
  }
}

}  // namespace

void register_cast_ops(OpRegistry& r) {
  r.add(onnx_op("BitCast", 26, infer_bitcast, bitcast_kernel));
  r.add(onnx_op("Cast", 1, [](InferContext& ctx) { ctx.set_output(0, cast_target(ctx), ctx.input_shape(0)); },
              [](KernelContext& ctx) { cast_tensor(ctx.input(0), ctx.output(0), narrow_options(ctx)); }));
  r.add(onnx_op("CastLike", 15,
              [](InferContext& ctx) { ctx.set_output(0, ctx.input_dtype(1), ctx.input_shape(0)); },
              [](KernelContext& ctx) { cast_tensor(ctx.input(0), ctx.output(0), narrow_options(ctx)); }));
}

}  // namespace onyx
