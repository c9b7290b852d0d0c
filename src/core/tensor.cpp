#include "onyx/tensor.h"

#include <cstring>
#include <new>

#include "core/narrow_types.h"
#include "onyx/checked.h"

namespace onyx {

Storage::Storage(Allocator& alloc, size_t bytes, DType dtype, size_t count)
    : data_(alloc.allocate(bytes)), bytes_(bytes), alloc_(&alloc), alloc_owner_(alloc.weak_from_this().lock()),
      device_(alloc.device()) {
  if (dtype == DType::kString) {
    ONYX_CHECK(device_.is_cpu(), "string tensors live on the CPU only");
    auto* s = static_cast<std::string*>(data_);
    for (size_t i = 0; i < count; ++i) new (s + i) std::string();
    string_count_ = count;
  } else if (dtype_is_object(dtype)) {
    ONYX_CHECK(device_.is_cpu(), dtype_name(dtype), " values live on the CPU only");
    auto* t = static_cast<Tensor*>(data_);
    for (size_t i = 0; i < count; ++i) new (t + i) Tensor();
    tensor_count_ = count;
  }
}

Storage::Storage(void* data, size_t bytes, std::shared_ptr<const void> keepalive, Device device)
    : data_(data), bytes_(bytes), keepalive_(std::move(keepalive)), device_(device) {}

Storage::~Storage() {
  if (!alloc_) return;
  auto* s = static_cast<std::string*>(data_);
  for (size_t i = 0; i < string_count_; ++i) s[i].~basic_string();
  auto* t = static_cast<Tensor*>(data_);
  for (size_t i = 0; i < tensor_count_; ++i) t[i].~Tensor();
  alloc_->deallocate(data_, bytes_);
}

Tensor::Tensor(DType dtype, Shape shape, Allocator& alloc) : dtype_(dtype), shape_(std::move(shape)) {
  ONYX_CHECK(dtype_supported(dtype), "cannot create a tensor of ", dtype_name(dtype));
  for (int64_t d : shape_.dims()) ONYX_CHECK(d >= 0, "cannot create a tensor of negative shape ", shape_.str());
  const int64_t n = shape_.numel();
  const size_t bytes = checked_bytes_lazy(n, dtype, [&] { return cat("a tensor of ", dtype_name(dtype), shape_.str()); });
  storage_ = std::make_shared<Storage>(alloc, bytes, dtype, static_cast<size_t>(n));
}

Tensor Tensor::borrow(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keepalive, Device device) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  for (int64_t d : t.shape_.dims()) ONYX_CHECK(d >= 0, "cannot borrow a tensor of negative shape ", t.shape_.str());
  const size_t bytes = checked_bytes(t.shape_.numel(), dtype, "a borrowed tensor");
  t.storage_ = std::make_shared<Storage>(data, bytes, std::move(keepalive), device);
  return t;
}

Tensor Tensor::view(Shape shape) const {
  ONYX_ASSERT(shape.numel() == numel(), "view ", shape.str(), " of ", shape_.str());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

namespace {
// A narrow element (core/narrow_types.h) read through visit_numeric: its value as a double.
struct Narrow {
  DType dtype;
};
}  // namespace

template <class Fn>
static auto visit_numeric(DType dt, Fn&& fn) {
  switch (dt) {
    case DType::kFloat32: return fn(float{});
    case DType::kFloat64: return fn(double{});
    case DType::kFloat16: return fn(Float16{});
    case DType::kBFloat16: return fn(BFloat16{});
    case DType::kInt8: return fn(int8_t{});
    case DType::kInt16: return fn(int16_t{});
    case DType::kInt32: return fn(int32_t{});
    case DType::kInt64: return fn(int64_t{});
    case DType::kUInt8: return fn(uint8_t{});
    case DType::kUInt16: return fn(uint16_t{});
    case DType::kUInt32: return fn(uint32_t{});
    case DType::kUInt64: return fn(uint64_t{});
    case DType::kBool: return fn(bool{});
    case DType::kFloat8E4M3FN: case DType::kFloat8E4M3FNUZ: case DType::kFloat8E5M2: case DType::kFloat8E5M2FNUZ:
    case DType::kUInt4: case DType::kInt4: case DType::kFloat4E2M1: case DType::kFloat8E8M0: case DType::kUInt2:
    case DType::kInt2: return fn(Narrow{dt});
    default: throw Error(cat("expected a numeric tensor, got ", dtype_name(dt)));
  }
}

double Tensor::get_as_double(int64_t i) const {
  ONYX_ASSERT(on_host(), "reading a ", device().str(), " tensor on the host");
  return visit_numeric(dtype_, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Narrow>)
      return narrow_to_double(tag.dtype, static_cast<const uint8_t*>(raw())[i]);
    else
      return static_cast<double>(static_cast<const T*>(raw())[i]);
  });
}

int64_t Tensor::get_as_int64(int64_t i) const {
  ONYX_ASSERT(on_host(), "reading a ", device().str(), " tensor on the host");
  return visit_numeric(dtype_, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Narrow>)
      return static_cast<int64_t>(narrow_to_double(tag.dtype, static_cast<const uint8_t*>(raw())[i]));
    else if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>)
      return static_cast<int64_t>(static_cast<float>(static_cast<const T*>(raw())[i]));
    else
      return static_cast<int64_t>(static_cast<const T*>(raw())[i]);
  });
}

std::vector<int64_t> Tensor::to_int64_vector() const {
  std::vector<int64_t> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[i] = get_as_int64(i);
  return v;
}

Tensor Tensor::clone(Allocator& alloc) const {
  ONYX_ASSERT(on_host() && alloc.device().is_cpu(), "clone copies host tensors; use the backend for device copies");
  Tensor t(dtype_, shape_, alloc);
  t.elem_dtype_ = elem_dtype_;
  if (dtype_ == DType::kString) {
    const auto* src = static_cast<const std::string*>(raw());
    auto* dst = t.data<std::string>();
    for (int64_t i = 0; i < numel(); ++i) dst[i] = src[i];
  } else if (dtype_is_object(dtype_)) {
    // Sequence and optional elements are immutable once made: the copy shares them.
    const auto* src = static_cast<const Tensor*>(raw());
    auto* dst = static_cast<Tensor*>(t.raw());
    for (int64_t i = 0; i < numel(); ++i) dst[i] = src[i];
  } else if (bytes()) {
    std::memcpy(t.raw(), raw(), bytes());
  }
  return t;
}

Tensor Tensor::sequence(const std::vector<Tensor>& elements, DType elem_dtype) {
  Tensor t(DType::kSequence, Shape{static_cast<int64_t>(elements.size())});
  for (const auto& e : elements) {
    ONYX_CHECK(e.defined() && e.on_host(), "a sequence holds defined host tensors");
    if (elem_dtype == DType::kUndefined) elem_dtype = e.dtype();
    ONYX_CHECK(e.dtype() == elem_dtype, "a sequence of ", dtype_name(elem_dtype), " cannot hold a tensor of ",
               dtype_name(e.dtype()));
  }
  auto* dst = static_cast<Tensor*>(t.raw());
  for (size_t i = 0; i < elements.size(); ++i) dst[i] = elements[i];
  t.elem_dtype_ = elem_dtype;
  return t;
}

Tensor Tensor::optional(const Tensor& value, DType elem_dtype) {
  Tensor t(DType::kOptional, Shape{value.defined() ? 1 : 0});
  if (value.defined()) {
    ONYX_CHECK(value.on_host(), "an optional holds a host value");
    ONYX_CHECK(elem_dtype == DType::kUndefined || elem_dtype == value.dtype(), "an optional of ",
               dtype_name(elem_dtype), " cannot hold a value of ", dtype_name(value.dtype()));
    *static_cast<Tensor*>(t.raw()) = value;
    elem_dtype = value.dtype();
  }
  t.elem_dtype_ = elem_dtype;
  return t;
}

Tensor Tensor::map(const Tensor& keys, const Tensor& values) {
  ONYX_CHECK(keys.dtype() == DType::kInt64 || keys.dtype() == DType::kString, "map keys must be int64 or strings, got ",
             keys.type_str());
  ONYX_CHECK(keys.rank() == 1 && values.rank() == 1 && keys.numel() == values.numel(), "a map needs 1-D keys and ",
             "values of one length, got ", keys.type_str(), " and ", values.type_str());
  ONYX_CHECK(keys.on_host() && values.on_host() && !dtype_is_object(values.dtype()), "map values must be host tensors");
  Tensor t(DType::kMap, Shape{2});
  auto* e = static_cast<Tensor*>(t.raw());
  e[0] = keys;
  e[1] = values;
  t.elem_dtype_ = values.dtype();
  return t;
}

const Tensor* Tensor::elements() const {
  ONYX_CHECK(dtype_ == DType::kSequence || dtype_ == DType::kOptional || dtype_ == DType::kMap, "a ",
             dtype_name(dtype_), " tensor has no element tensors");
  return static_cast<const Tensor*>(raw());
}

std::string Tensor::type_str() const {
  if (dtype_ == DType::kMap) return cat("map<", dtype_name(elements()[0].dtype()), ",", dtype_name(elem_dtype_), ">");
  if ((dtype_ == DType::kSequence || dtype_ == DType::kOptional) && elem_dtype_ != DType::kUndefined)
    return cat(dtype_name(dtype_), "<", dtype_name(elem_dtype_), ">", shape_.str());
  return cat(dtype_name(dtype_), shape_.str());
}

}  // namespace onyx
