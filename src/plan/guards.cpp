#include "plan/guards.h"

namespace onyx {

std::string_view guard_reason_name(GuardReason r) {
  switch (r) {
    case GuardReason::kInitializer: return "initializer";
    case GuardReason::kGraphInput: return "graph input";
    case GuardReason::kGraphOutput: return "graph output";
    case GuardReason::kOuterScope: return "outer scope";
    case GuardReason::kMemoized: return "memoized";
  }
  return "?";
}

GuardList::GuardList(const Graph& g) : reasons_(g.values.size()) {
  for (int id = 0; id < static_cast<int>(g.values.size()); ++id) {
    const Value& v = g.values[id];
    if (v.is_initializer) reasons_[id] = GuardReason::kInitializer;
    else if (v.is_input) reasons_[id] = GuardReason::kGraphInput;
    else if (v.is_outer) reasons_[id] = GuardReason::kOuterScope;
  }
  for (int id : g.outputs) reasons_[id] = GuardReason::kGraphOutput;
}

}  // namespace onyx
