// Tensor: a dtype, a shape and a view into a Storage.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "onyx/allocator.h"
#include "onyx/dtype.h"
#include "onyx/shape.h"

namespace onyx {

// One block of bytes. An owning Storage returns its bytes to the allocator that
// gave them when the last tensor using it goes away; a borrowed Storage points
// at memory someone else owns and keeps `keepalive` (a mapping, a caller's
// buffer owner) alive instead.
class Storage {
 public:
  // Owning: allocates `bytes` from `alloc`. For kString, constructs `count` empty strings.
  Storage(Allocator& alloc, size_t bytes, DType dtype, size_t count);
  // Borrowed: no allocator; `keepalive` may be null when the caller guarantees lifetime.
  Storage(void* data, size_t bytes, std::shared_ptr<const void> keepalive, Device device = Device::cpu());
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool owning() const { return alloc_ != nullptr; }
  Allocator* allocator() const { return alloc_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Allocator* alloc_ = nullptr;
  std::shared_ptr<Allocator> alloc_owner_;  // set when the allocator is shared-owned
  size_t string_count_ = 0;
  size_t tensor_count_ = 0;  // the elements of a sequence or optional
  std::shared_ptr<const void> keepalive_;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates an uninitialized tensor (strings start empty).
  Tensor(DType dtype, Shape shape, Allocator& alloc = cpu_allocator());
  // Wraps memory owned elsewhere; `keepalive` holds its owner, if any.
  static Tensor borrow(DType dtype, Shape shape, void* data, std::shared_ptr<const void> keepalive = nullptr,
                       Device device = Device::cpu());
  // A tensor sharing this one's storage with another shape of the same element count (a view).
  Tensor view(Shape shape) const;

  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape) {
    Tensor t(dtype_of<T>, std::move(shape));
    ONYX_CHECK(static_cast<int64_t>(values.size()) == t.numel(), "from_vector: ", values.size(),
               " values for shape ", t.shape().str());
    T* p = t.data<T>();
    for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
    return t;
  }
  template <class T>
  static Tensor scalar(T value) {
    return from_vector<T>({value}, Shape{});
  }

  bool defined() const { return dtype_ != DType::kUndefined; }
  // Where the bytes are. Host code may read only tensors on the CPU.
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool on_host() const { return device().is_cpu(); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.rank(); }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }

  void* raw() const { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  template <class T>
  T* data() const {
    ONYX_ASSERT(dtype_of<T> == dtype_ || (sizeof(T) == dtype_size(dtype_) && !std::is_same_v<T, std::string>),
                "tensor of ", dtype_name(dtype_), " read as another type");
    return static_cast<T*>(raw());
  }
  template <class T>
  std::span<T> span() const {
    return {data<T>(), static_cast<size_t>(numel())};
  }
  // A sequence of these tensors (same element type), and an optional holding `value`
  // or none (an undefined tensor). Their elements: elements<Tensor>().
  static Tensor sequence(const std::vector<Tensor>& elements, DType elem_dtype = DType::kUndefined);
  static Tensor optional(const Tensor& value, DType elem_dtype = DType::kUndefined);
  // A map of keys (1-D int64 or strings, distinct) to values (1-D, one a key): elements() are
  // [keys, values]; element_dtype() is the values' type.
  static Tensor map(const Tensor& keys, const Tensor& values);
  // A sequence's or optional's elements (numel() of them), and the type of its tensors
  // (kSequence for an optional sequence); kUndefined when not known.
  const Tensor* elements() const;
  DType element_dtype() const { return elem_dtype_; }
  // Reads element i (flat, row-major) of any numeric/bool dtype as double / int64.
  double get_as_double(int64_t i) const;
  int64_t get_as_int64(int64_t i) const;
  // Copies of the values as int64 (for shape tensors, axes, indices).
  std::vector<int64_t> to_int64_vector() const;

  // A new owning tensor with the same contents.
  Tensor clone(Allocator& alloc = cpu_allocator()) const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  // Whether two tensors share bytes of one storage.
  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  // "float32[2,3]"
  std::string type_str() const;

 private:
  DType dtype_ = DType::kUndefined;
  DType elem_dtype_ = DType::kUndefined;  // sequences and optionals
  Shape shape_;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
};

}  // namespace onyx
