#include "ops/value_inputs.h"

#include <map>
#include <string>

namespace onyx {

std::vector<int> value_inputs(const Node& node) {
  static const std::map<std::string, std::vector<int>> kTable = {
      {"Reshape", {1}},       {"Expand", {1}},          {"Slice", {1, 2, 3, 4}}, {"Split", {1}},
      {"Squeeze", {1}},       {"Unsqueeze", {1}},       {"Range", {0, 1, 2}},    {"ConstantOfShape", {0}},
      {"Tile", {1}},          {"Pad", {1, 2, 3}},       {"TopK", {1}},           {"OneHot", {1}},
      {"Resize", {1, 2, 3}},  {"Upsample", {1}},        {"CenterCropPad", {1}},  {"Compress", {1}},
      {"NonZero", {0}},       {"Unique", {0}},          {"ReduceSum", {1}},      {"ReduceMean", {1}},
      {"ReduceMax", {1}},     {"ReduceMin", {1}},       {"ReduceProd", {1}},     {"ReduceL1", {1}},
      {"ReduceL2", {1}},      {"ReduceLogSum", {1}},    {"ReduceLogSumExp", {1}}, {"ReduceSumSquare", {1}},
      {"EyeLike", {}},        {"Col2Im", {1, 2}},       {"Trilu", {}},           {"Shape", {}},
  };
  if (!node.domain.empty()) return {};
  auto it = kTable.find(node.op_type);
  return it == kTable.end() ? std::vector<int>{} : it->second;
}

bool reads_only_metadata(const Node& node) {
  return node.domain.empty() && (node.op_type == "Shape" || node.op_type == "Size");
}

}  // namespace onyx
