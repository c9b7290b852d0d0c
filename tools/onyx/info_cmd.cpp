// onyx info MODEL: what a model declares, and which of its ops onyx lacks.
#include <algorithm>
#include <iostream>

#include "cli.h"

namespace onyx::cli {

int cmd_info(const std::string& path, const std::vector<std::string>& args) {
  if (!args.empty()) throw UsageError(cat("info takes no options, got '", args[0], "'"));
  ModelInfo info = inspect_model(path);
  const ModelSummary& s = info.summary;
  std::cout << "model: " << s.path << "\n";
  std::cout << "ir_version: " << s.ir_version << (s.producer.empty() ? "" : "  producer: " + s.producer) << "\n";
  std::cout << "opsets:";
  for (const auto& [d, v] : s.opsets) std::cout << " " << (d.empty() ? "ai.onnx" : d) << "=" << v;
  std::cout << "\ninputs:\n";
  for (const auto& d : info.inputs)
    std::cout << "  " << d.name << ": " << d.type_str() << (d.has_default ? " (has a default)" : "") << "\n";
  std::cout << "outputs:\n";
  for (const auto& d : info.outputs) std::cout << "  " << d.name << ": " << d.type_str() << "\n";
  std::cout << "initializers: " << s.initializer_count << " (" << human_bytes(double(s.initializer_bytes)) << ", "
            << s.initializer_bytes << " bytes)\n";
  std::cout << "nodes: " << s.node_count << "\nops:\n";
  std::vector<std::pair<int, std::string>> ops;
  for (const auto& [op, n] : s.op_histogram) ops.emplace_back(-n, op);
  std::sort(ops.begin(), ops.end());
  for (const auto& [n, op] : ops) std::cout << "  " << op << ": " << -n << "\n";
  if (!info.unsupported_ops.empty()) {
    std::cout << "not supported by onyx:";
    for (const auto& op : info.unsupported_ops) std::cout << " " << op;
    std::cout << "\n";
    return 1;
  }
  return 0;
}

}  // namespace onyx::cli
