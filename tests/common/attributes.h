// Attribute builders for tests that make nodes by hand (unit tests and the GPU harness).
#pragma once

#include <string>
#include <vector>

#include "model/ir.h"

namespace onyx::test {

inline Attribute attr_int(const std::string& name, int64_t v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInt;
  a.i = v;
  return a;
}
inline Attribute attr_float(const std::string& name, float v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kFloat;
  a.f = v;
  return a;
}
inline Attribute attr_ints(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}
inline Attribute attr_string(const std::string& name, std::string v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kString;
  a.s = std::move(v);
  return a;
}

inline Attribute attr_tensor(const std::string& name, Tensor v) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kTensor;
  a.t = std::move(v);
  return a;
}

}  // namespace onyx::test
