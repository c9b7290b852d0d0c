// Definitions keyed by (domain, name) and versioned by since_version: the one rule by
// which onyx finds what applies to a node, for CPU ops and backend kernels alike.
// `Def` has `domain`, `name` and `since_version` fields.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "model/ir.h"

namespace onyx {

template <class Def>
class OpTable {
 public:
  // Returns false when (domain, name, since_version) is already there.
  bool add(Def def) {
    auto& list = defs_[{normalize_domain(def.domain), def.name}];
    for (const auto& d : list)
      if (d.since_version == def.since_version) return false;
    list.push_back(std::move(def));
    std::sort(list.begin(), list.end(), [](const Def& a, const Def& b) { return a.since_version < b.since_version; });
    return true;
  }
  // The definition that applies at `opset` (the newest since_version <= opset), or null.
  const Def* find(const std::string& domain, const std::string& name, int opset) const {
    auto it = defs_.find({normalize_domain(domain), name});
    if (it == defs_.end()) return nullptr;
    const Def* best = nullptr;
    for (const auto& d : it->second)
      if (d.since_version <= opset) best = &d;
    return best;
  }
  const Def* find(const Node& node) const { return find(node.domain, node.op_type, node.opset); }
  // Every version of (domain, name), oldest first; empty when unknown.
  std::vector<const Def*> versions(const std::string& domain, const std::string& name) const {
    std::vector<const Def*> out;
    auto it = defs_.find({normalize_domain(domain), name});
    if (it != defs_.end())
      for (const auto& d : it->second) out.push_back(&d);
    return out;
  }
  size_t size() const { return defs_.size(); }
  std::vector<std::string> names() const {  // "domain::name" or "name"
    std::vector<std::string> out;
    for (const auto& [key, list] : defs_) out.push_back(key.first.empty() ? key.second : key.first + "::" + key.second);
    return out;
  }

 private:
  std::map<std::pair<std::string, std::string>, std::vector<Def>> defs_;
};

}  // namespace onyx
