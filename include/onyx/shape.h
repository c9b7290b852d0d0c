// Concrete tensor shapes and partially known shapes (for inference).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace onyx {

// A concrete shape: every dimension known and >= 0.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  int64_t& operator[](size_t i) { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  int64_t numel() const;
  // Row-major element strides.
  std::vector<int64_t> strides() const;
  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }
  // "[2,3,4]"
  std::string str() const;

 private:
  std::vector<int64_t> dims_;
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
