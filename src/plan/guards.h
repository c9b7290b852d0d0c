// What the executor may never release or overwrite, and why (DESIGN L4, L5).
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "model/ir.h"

namespace onyx {

// Why a value must never be released by the executor. One list, read by every
// pass that frees or overwrites memory (L5).
enum class GuardReason {
  kInitializer,  // weights live as long as the model
  kGraphInput,   // the caller's buffer: borrowed, never ours to free or overwrite
  kGraphOutput,  // handed to the caller at the end of the run
  kOuterScope,   // a subgraph's borrowed view of an enclosing graph's value
  kMemoized,     // computed once when planning and served again on every run of the plan
};
std::string_view guard_reason_name(GuardReason r);

// Aliases need no entry: a view shares its source's Storage, and a Storage goes
// back to its allocator only when the last tensor using it is released, so a
// source's bytes outlive every view of it by construction.
class GuardList {
 public:
  explicit GuardList(const Graph& g);
  bool guarded(int value) const { return reasons_[value].has_value(); }
  void add(int value, GuardReason reason) { reasons_[value] = reason; }
  std::optional<GuardReason> reason(int value) const { return reasons_[value]; }

 private:
  std::vector<std::optional<GuardReason>> reasons_;
};

}  // namespace onyx
