#include "passes/pattern_match.h"

namespace onyx::rewrite {

int other_input(const Node& n, int known) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == known) return n.inputs[1];
  if (n.inputs[1] == known) return n.inputs[0];
  return -1;
}

}  // namespace onyx::rewrite
