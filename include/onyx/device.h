// Devices, and the one function that resolves a device name (DESIGN L8).
#pragma once

#include <string>

namespace onyx {

struct Device {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int i) { return {Kind::kCuda, i}; }
  bool is_cpu() const { return kind == Kind::kCpu; }
  bool operator==(const Device& o) const { return kind == o.kind && (kind == Kind::kCpu || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
};

// Parses "cpu", "cuda" (= "cuda:0") or "cuda:N" and checks that the device exists.
// Every component of a session asks this function; a device that does not exist
// is an error that says which devices do.
Device resolve_device(const std::string& spec);

}  // namespace onyx
