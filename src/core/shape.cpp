#include "onyx/shape.h"

#include "onyx/checked.h"

namespace onyx {

int64_t Shape::checked_numel() const {
  try {
    return checked_product(std::span<const int64_t>(dims_.data(), dims_.size()));
  } catch (Error&) {
    throw Error(cat("shape ", str(), " has more elements than fit in 64 bits"));
  }
}

std::vector<int64_t> Shape::strides() const {
  std::vector<int64_t> s(dims_.size());
  int64_t acc = 1;
  for (size_t i = dims_.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims_[i];
  }
  return s;
}

static std::string dims_str(std::span<const int64_t> dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i] < 0 ? "?" : std::to_string(dims[i]);
  }
  return s + "]";
}

std::string Shape::str() const { return dims_str({dims_.data(), dims_.size()}); }

bool PartialShape::fully_known() const {
  if (!rank_known) return false;
  for (int64_t d : dims)
    if (d < 0) return false;
  return true;
}

Shape PartialShape::to_shape() const {
  ONYX_ASSERT(fully_known(), "shape ", str(), " is not fully known");
  return Shape(dims);
}

std::string PartialShape::str() const { return rank_known ? dims_str(dims) : "[unknown rank]"; }

int64_t normalize_axis(int64_t axis, int64_t rank) {
  ONYX_CHECK(axis >= -rank && axis < rank, "axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.rank() ? 1 : a[i - (r - a.rank())];
    int64_t db = i < r - b.rank() ? 1 : b[i - (r - b.rank())];
    ONYX_CHECK(da == db || da == 1 || db == 1, "shapes ", a.str(), " and ", b.str(),
               " do not broadcast (axis ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return Shape(out);
}

PartialShape broadcast_shapes(const PartialShape& a, const PartialShape& b) {
  if (!a.rank_known || !b.rank_known) return PartialShape();
  size_t r = std::max(a.dims.size(), b.dims.size());
  PartialShape out = PartialShape::of_rank(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.dims.size() ? 1 : a.dims[i - (r - a.dims.size())];
    int64_t db = i < r - b.dims.size() ? 1 : b.dims[i - (r - b.dims.size())];
    if (da == 1) out.dims[i] = db;
    else if (db == 1) out.dims[i] = da;
    else if (da < 0 || db < 0) out.dims[i] = da < 0 ? db : da;
    else {
      ONYX_CHECK(da == db, "shapes ", a.str(), " and ", b.str(), " do not broadcast (axis ", i, ": ", da,
                 " vs ", db, ")");
      out.dims[i] = da;
    }
  }
  return out;
}

}  // namespace onyx
