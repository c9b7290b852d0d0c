#include "model/tensor_proto.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "core/narrow_types.h"
#include "model/mapped_file.h"
#include "onyx/checked.h"
#include "onnx/onnx.pb.h"

namespace onyx {

namespace {

template <class Dst, class Field>
void copy_field(const Field& field, Tensor& t) {
  Dst* out = t.data<Dst>();
  for (int i = 0; i < field.size(); ++i) out[i] = static_cast<Dst>(field.Get(i));
}

// float16/bfloat16/bool/int8/... arrive in int32_data, one element per entry.
template <class Dst>
void copy_bits_field(const google::protobuf::RepeatedField<int32_t>& field, Tensor& t) {
  auto* out = static_cast<uint8_t*>(t.raw());
  for (int i = 0; i < field.size(); ++i) {
    auto v = static_cast<std::make_unsigned_t<int32_t>>(field.Get(i));
    if constexpr (sizeof(Dst) == 1) out[i] = static_cast<uint8_t>(v);
    else {
      uint16_t h = static_cast<uint16_t>(v);
      std::memcpy(out + 2 * i, &h, 2);
    }
  }
}

size_t typed_count(const onnx::TensorProto& p, DType dt) {
  switch (dt) {
    case DType::kFloat32: return p.float_data_size();
    case DType::kFloat64: return p.double_data_size();
    case DType::kInt64: return p.int64_data_size();
    case DType::kUInt32: case DType::kUInt64: return p.uint64_data_size();
    case DType::kString: return p.string_data_size();
    default: return p.int32_data_size();
  }
}

int64_t parse_count(const std::string& key, const std::string& text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  ONYX_CHECK(ec == std::errc() && end == text.data() + text.size() && v >= 0, "external data ", key, " '", text,
             "' is not a non-negative integer");
  return v;
}

Tensor from_external(const onnx::TensorProto& p, DType dt, const Shape& shape, TensorLoadContext& ctx) {
  ONYX_CHECK(dt != DType::kString, "string tensors cannot be stored as external data");
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") location = kv.value();
    else if (kv.key() == "offset") offset = parse_count("offset", kv.value());
    else if (kv.key() == "length") length = parse_count("length", kv.value());
  }
  ONYX_CHECK(!location.empty(), "external data has no 'location'");
  std::filesystem::path rel(location);
  ONYX_CHECK(!rel.is_absolute(), "external data location '", location, "' must be relative to the model");
  for (const auto& part : rel) ONYX_CHECK(part != "..", "external data location '", location, "' leaves the model's folder");
  namespace fs = std::filesystem;
  const std::string joined = (fs::path(ctx.base_dir) / rel).string();
  // The path as the system resolves it, symlinks followed: it must stay inside the model's
  // folder (resolved the same way) and name a regular file (not a FIFO, a device, a folder).
  std::error_code ec;
  const fs::path folder = fs::canonical(ctx.base_dir.empty() ? "." : ctx.base_dir, ec);
  ONYX_CHECK(!ec, "cannot resolve the model's folder '", ctx.base_dir, "': ", ec.message());
  ONYX_CHECK(fs::exists(joined, ec), "external data file '", joined, "' does not exist");
  const fs::path resolved = fs::canonical(joined, ec);
  ONYX_CHECK(!ec, "cannot resolve external data file '", joined, "': ", ec.message());
  auto [f, r] = std::mismatch(folder.begin(), folder.end(), resolved.begin(), resolved.end());
  ONYX_CHECK(f == folder.end() && r != resolved.end(), "external data location '", location, "' resolves to '",
             resolved.string(), "', outside the model's folder '", folder.string(), "'");
  ONYX_CHECK(fs::is_regular_file(resolved, ec), "external data file '", joined, "' is not a regular file");
  const std::string full = resolved.string();
  auto& mapped = ctx.mapped[full];
  if (!mapped) mapped = MappedFile::open(full);
  const bool narrow = dtype_is_narrow(dt);  // packed in the file, unpacked below
  const size_t need = narrow ? static_cast<size_t>(narrow_packed_bytes(dt, shape.numel()))
                             : checked_bytes(shape.numel(), dt, cat("external data of ", dtype_name(dt), shape.str()));
  if (length < 0) length = static_cast<int64_t>(need);
  ONYX_CHECK(static_cast<size_t>(length) == need, "external data length ", length, " does not match ", need,
             " bytes of ", dtype_name(dt), shape.str());
  ONYX_CHECK(static_cast<uint64_t>(offset) <= mapped->size() &&
                 static_cast<uint64_t>(length) <= mapped->size() - static_cast<size_t>(offset),
             "external data at offset ", offset, " of length ", length, " lies outside '", full, "' (",
             mapped->size(), " bytes)");
  const char* src = mapped->data() + offset;
  if (narrow) {
    Tensor t(dt, shape);
    unpack_narrow(dt, reinterpret_cast<const uint8_t*>(src), shape.numel(), static_cast<uint8_t*>(t.raw()));
    return t;
  }
  if (reinterpret_cast<uintptr_t>(src) % dtype_size(dt) == 0)
    return Tensor::borrow(dt, shape, const_cast<char*>(src), mapped);  // read-only: kernels never write inputs
  Tensor t(dt, shape);
  std::memcpy(t.raw(), src, need);
  return t;
}

// Narrow types arrive packed (4- and 2-bit elements share bytes, low bits first), in raw_data
// or one packed byte per int32_data entry; onyx unpacks them to a byte per element.
Tensor narrow_from_proto(const onnx::TensorProto& p, DType dt, const Shape& shape) {
  const int64_t n = shape.numel();
  const int64_t packed = narrow_packed_bytes(dt, n);
  std::vector<uint8_t> bytes;
  if (p.has_raw_data()) {
    ONYX_CHECK(static_cast<int64_t>(p.raw_data().size()) == packed, "raw data holds ", p.raw_data().size(),
               " bytes, but ", dtype_name(dt), shape.str(), " packs into ", packed);
    bytes.assign(p.raw_data().begin(), p.raw_data().end());
  } else {
    ONYX_CHECK(p.int32_data_size() == packed, "holds ", p.int32_data_size(), " values, but ", dtype_name(dt),
               shape.str(), " packs into ", packed);
    for (int32_t v : p.int32_data()) bytes.push_back(static_cast<uint8_t>(v));
  }
  Tensor t(dt, shape);
  unpack_narrow(dt, bytes.data(), n, static_cast<uint8_t*>(t.raw()));
  return t;
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, TensorLoadContext& ctx) {
  DType dt = dtype_from_onnx(p.data_type());
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  for (int64_t d : dims) ONYX_CHECK(d >= 0, "negative dimension in shape");
  Shape shape(dims);
  const size_t n = static_cast<size_t>(shape.numel());
  const size_t need = checked_bytes(shape.numel(), dt, cat("shape ", shape.str(), " of ", dtype_name(dt)));

  if (p.has_data_location() && p.data_location() == onnx::TensorProto::EXTERNAL)
    return from_external(p, dt, shape, ctx);

  if (dtype_is_narrow(dt)) return narrow_from_proto(p, dt, shape);

  if (p.has_raw_data() && dt != DType::kString) {
    std::shared_ptr<std::string> holder;
    if (ctx.proto_owner) {
      // The message is the loader's own: the bytes move into a holder of their own (no copy).
      auto [it, fresh] = ctx.moved.try_emplace(&p);
      if (fresh) it->second = std::make_shared<std::string>(std::move(*const_cast<onnx::TensorProto&>(p).mutable_raw_data()));
      holder = it->second;
    }
    const std::string& raw = holder ? *holder : p.raw_data();
    ONYX_CHECK(raw.size() == need, "raw data holds ", raw.size(), " bytes, but ", dtype_name(dt), shape.str(),
               " needs ", need);
    if (holder && reinterpret_cast<uintptr_t>(raw.data()) % dtype_size(dt) == 0)
      return Tensor::borrow(dt, shape, const_cast<char*>(raw.data()), holder);
    Tensor t(dt, shape);
    if (n) std::memcpy(t.raw(), raw.data(), raw.size());
    return t;
  }

  size_t have = typed_count(p, dt);
  ONYX_CHECK(have == n, "holds ", have, " values, but shape ", shape.str(), " needs ", n);
  Tensor t(dt, shape);
  switch (dt) {
    case DType::kFloat32: copy_field<float>(p.float_data(), t); break;
    case DType::kFloat64: copy_field<double>(p.double_data(), t); break;
    case DType::kInt64: copy_field<int64_t>(p.int64_data(), t); break;
    case DType::kUInt32: copy_field<uint32_t>(p.uint64_data(), t); break;
    case DType::kUInt64: copy_field<uint64_t>(p.uint64_data(), t); break;
    case DType::kInt32: copy_field<int32_t>(p.int32_data(), t); break;
    case DType::kInt16: copy_field<int16_t>(p.int32_data(), t); break;
    case DType::kUInt16: copy_field<uint16_t>(p.int32_data(), t); break;
    case DType::kInt8: copy_field<int8_t>(p.int32_data(), t); break;
    case DType::kUInt8: copy_field<uint8_t>(p.int32_data(), t); break;
    case DType::kBool: copy_bits_field<bool>(p.int32_data(), t); break;
    case DType::kFloat16: copy_bits_field<Float16>(p.int32_data(), t); break;
    case DType::kBFloat16: copy_bits_field<BFloat16>(p.int32_data(), t); break;
    case DType::kString: {
      auto* s = t.data<std::string>();
      for (size_t i = 0; i < n; ++i) s[i] = p.string_data(static_cast<int>(i));
      break;
    }
    default: throw Error(cat("element type ", dtype_name(dt), " is not supported"));
  }
  return t;
}

}  // namespace onyx
