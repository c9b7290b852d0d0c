// Concrete tensor shapes and partially known shapes (for inference).
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <initializer_list>
#include <string>
#include <vector>

namespace onyx {

// The dimensions of a concrete shape: a vector of int64_t that keeps up to kInline of
// them in place, so that copying a shape (every copy of a tensor copies one) allocates
// nothing for the ranks models use; a longer one lives on the heap. It converts to and
// from std::vector<int64_t>.
class Dims {
 public:
  static constexpr size_t kInline = 6;
  using value_type = int64_t;
  using size_type = size_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Dims() = default;
  Dims(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  Dims(const std::vector<int64_t>& dims) { assign(dims.data(), dims.data() + dims.size()); }  // NOLINT: implicit
  Dims(const int64_t* first, const int64_t* last) { assign(first, last); }
  Dims(size_t n, int64_t value) { assign(n, value); }
  Dims(const Dims& o) { assign(o.begin(), o.end()); }
  Dims(Dims&& o) noexcept { take(o); }
  Dims& operator=(const Dims& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  Dims& operator=(Dims&& o) noexcept {
    if (this != &o) {
      free_heap();
      take(o);
    }
    return *this;
  }
  ~Dims() { free_heap(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return heap() ? u_.heap : u_.inline_dims; }
  const int64_t* data() const { return heap() ? u_.heap : u_.inline_dims; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& front() { return data()[0]; }
  int64_t front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  int64_t back() const { return data()[size_ - 1]; }

  void assign(const int64_t* first, const int64_t* last) {
    const size_t n = static_cast<size_t>(last - first);
    if (n > capacity_) grow(n, false);
    std::copy(first, last, data());
    size_ = n;
  }
  void assign(size_t n, int64_t value) {
    if (n > capacity_) grow(n, false);
    std::fill(data(), data() + n, value);
    size_ = n;
  }
  void push_back(int64_t d) {
    if (size_ == capacity_) grow(capacity_ * 2, true);
    data()[size_++] = d;
  }
  void pop_back() { --size_; }
  void resize(size_t n, int64_t value = 0) {
    if (n > capacity_) grow(n, true);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = n;
  }
  void clear() { size_ = 0; }
  // Inserts `d` before `pos`; returns where it went.
  iterator insert(const_iterator pos, int64_t d) {
    const size_t at = static_cast<size_t>(pos - begin());
    push_back(0);
    std::copy_backward(begin() + at, end() - 1, end());
    data()[at] = d;
    return begin() + at;
  }
  iterator erase(const_iterator pos) {
    const size_t at = static_cast<size_t>(pos - begin());
    std::copy(begin() + at + 1, end(), begin() + at);
    --size_;
    return begin() + at;
  }

  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }  // NOLINT: implicit
  std::vector<int64_t> to_vector() const { return *this; }

  friend bool operator==(const Dims& a, const Dims& b) { return std::equal(a.begin(), a.end(), b.begin(), b.end()); }
  friend bool operator==(const Dims& a, const std::vector<int64_t>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool heap() const { return capacity_ > kInline; }
  void grow(size_t n, bool keep) {
    n = std::max(n, kInline * 2);
    int64_t* p = new int64_t[n];
    if (keep) std::copy(begin(), end(), p);
    free_heap();
    u_.heap = p;
    capacity_ = n;
  }
  void free_heap() {
    if (heap()) delete[] u_.heap;
    capacity_ = kInline;
  }
  void take(Dims& o) {
    size_ = o.size_;
    capacity_ = o.capacity_;
    if (o.heap()) u_.heap = o.u_.heap;
    else std::copy(o.u_.inline_dims, o.u_.inline_dims + o.size_, u_.inline_dims);
    o.size_ = 0;
    o.capacity_ = kInline;
  }

  size_t size_ = 0;
  size_t capacity_ = kInline;
  union {
    int64_t inline_dims[kInline];
    int64_t* heap;
  } u_;
};

// A concrete shape: every dimension known and >= 0.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(const std::vector<int64_t>& dims) : dims_(dims) {}
  explicit Shape(Dims dims) : dims_(std::move(dims)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  const Dims& dims() const { return dims_; }
  Dims& dims() { return dims_; }
  // The element count; throws when it does not fit in 64 bits.
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims_)
      if (__builtin_mul_overflow(n, d, &n)) return checked_numel();  // 0 if a later dim is 0; else throws
    return n;
  }
  // Row-major element strides.
  std::vector<int64_t> strides() const;
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return !(dims_ == o.dims_); }
  // "[2,3,4]"
  std::string str() const;

 private:
  int64_t checked_numel() const;
  Dims dims_;
};

// A shape that may be partly unknown: the rank may be unknown, and each
// dimension is either a value >= 0 or kUnknown.
struct PartialShape {
  static constexpr int64_t kUnknown = -1;
  bool rank_known = false;
  std::vector<int64_t> dims;

  PartialShape() = default;
  PartialShape(const Shape& s) : rank_known(true), dims(s.dims()) {}  // NOLINT: implicit by design
  static PartialShape of_rank(size_t r) {
    PartialShape p;
    p.rank_known = true;
    p.dims.assign(r, kUnknown);
    return p;
  }
  bool fully_known() const;
  Shape to_shape() const;  // requires fully_known()
  std::string str() const;
};

// Normalizes a possibly negative axis into [0, rank); throws naming the axis otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank);
// Numpy-style broadcast of two shapes; throws when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b);
PartialShape broadcast_shapes(const PartialShape& a, const PartialShape& b);

}  // namespace onyx
