// onyx plan MODEL: the memory plan (and, on a GPU, the placement) of one input-shape signature.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"

namespace onyx::cli {

namespace {

struct PlanArgs {
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, int64_t> dims;
  bool json = false;
  size_t top = 10;
  SessionOptions session;
};

PlanArgs parse(const std::vector<std::string>& args) {
  PlanArgs p;
  Args a(args);
  while (!a.done()) {
    const std::string& opt = a.next();
    if (opt == "--shape") {
      auto [name, text] = split(a.value());
      std::vector<int64_t> d;
      size_t start = 0;
      while (!text.empty()) {
        size_t x = text.find('x', start);
        d.push_back(to_int(text.substr(start, x == std::string::npos ? std::string::npos : x - start)));
        if (x == std::string::npos) break;
        start = x + 1;
      }
      p.shapes[name] = d;
    } else if (opt == "--dim") {
      auto [k, v] = split(a.value());
      p.dims[k] = to_int(v);
    } else if (opt == "--json") {
      p.json = true;
    } else if (opt == "--device") {
      p.session.device = a.value();
    } else if (opt == "--values") {
      p.top = static_cast<size_t>(to_int(a.value()));
    } else {
      throw UsageError(cat("unknown option '", opt, "'"));
    }
  }
  return p;
}

void print_json(const std::string& path, const PlanSummary& p, const std::vector<const PlanSummary::Value*>& largest) {
  nlohmann::ordered_json j;
  j["model"] = path;
  j["device"] = p.device;
  j["steps"] = p.steps;
  j["folded_steps"] = p.folded_steps;
  j["in_place"] = p.in_place;
  j["arena_bytes"] = p.arena_bytes;
  j["lower_bound_bytes"] = p.lower_bound_bytes;
  j["ratio"] = p.ratio();
  j["no_reuse_bytes"] = p.no_reuse_bytes;
  j["alignment"] = p.alignment;
  j["algorithm"] = p.algorithm;
  j["peak_step"] = p.peak_step;
  j["peak_node"] = p.peak_node;
  j["host_arena_bytes"] = p.host_arena_bytes;
  j["capture_blocker"] = p.capture_blocker;
  j["dynamic_boundaries"] = nlohmann::ordered_json::array();
  for (const auto& b : p.dynamic_boundaries)
    j["dynamic_boundaries"].push_back({{"step", b.step}, {"node", b.node}, {"reason", b.reason}});
  j["cpu_fallbacks"] = nlohmann::ordered_json::array();
  for (const auto& s : p.schedule)
    if (!s.fallback.empty()) j["cpu_fallbacks"].push_back({{"node", s.node}, {"reason", s.fallback}});
  j["largest_values"] = nlohmann::ordered_json::array();
  for (const auto* v : largest)
    j["largest_values"].push_back({{"name", v->name}, {"type", v->type}, {"kind", v->kind}, {"bytes", v->bytes},
                                   {"offset", v->offset}, {"first", v->first}, {"last", v->last}, {"device", v->device}});
  std::cout << j.dump(2) << "\n";
}

void print_text(const std::string& path, const PlanArgs& a, const PlanSummary& p,
                const std::vector<const PlanSummary::Value*>& largest) {
  std::cout << "model: " << path << "\ninputs:";
  for (const auto& [name, d] : a.shapes) std::cout << " " << name << "=" << Shape(d).str();
  std::cout << "\nsteps: " << p.steps << " (" << p.folded_steps << " computed while planning, " << p.in_place
            << " in place)\n";
  std::cout << "arena (" << p.device << "): " << human_bytes(double(p.arena_bytes)) << " (" << p.arena_bytes << " B, "
            << p.algorithm << ", alignment " << p.alignment << ")\n";
  if (p.host_arena_bytes) std::cout << "host arena for CPU fallbacks: " << p.host_arena_bytes << " B\n";
  std::cout << "lower bound: " << human_bytes(double(p.lower_bound_bytes)) << " (" << p.lower_bound_bytes << " B)\n";
  std::printf("R = arena / lower bound: %.4f\n", p.ratio());
  std::cout << "no reuse: " << human_bytes(double(p.no_reuse_bytes)) << " (" << p.no_reuse_bytes << " B)\n";
  std::cout << "most live at step " << p.peak_step << (p.peak_node.empty() ? "" : " (" + p.peak_node + ")") << "\n";
  std::cout << "dynamic boundaries: " << p.dynamic_boundaries.size() << "\n";
  for (const auto& b : p.dynamic_boundaries) std::cout << "  step " << b.step << " " << b.node << ": " << b.reason << "\n";
  for (const auto& s : p.schedule)
    if (!s.fallback.empty()) std::cout << "cpu fallback: " << s.node << ": " << s.fallback << "\n";
  if (!p.capture_blocker.empty()) std::cout << "not capturable: " << p.capture_blocker << "\n";
  std::cout << "largest values:\n";
  for (const auto* v : largest)
    std::cout << "  " << v->name << "  " << v->type << "  " << human_bytes(double(v->bytes)) << "  " << v->kind
              << (v->device == "cpu" ? "" : " on " + v->device) << (v->kind == "arena" ? cat(" @", v->offset) : "")
              << "  steps " << v->first << ".." << v->last << (v->alias_of.empty() ? "" : "  shares " + v->alias_of)
              << (v->in_place ? " (in place)" : "") << "\n";
}

}  // namespace

int cmd_plan(const std::string& path, const std::vector<std::string>& args) {
  PlanArgs a = parse(args);
  auto session = Session::load(path, a.session);
  for (const auto& d : session->inputs()) {
    if (a.shapes.count(d.name) || d.has_default || !d.rank_known) continue;
    std::vector<int64_t> s;
    bool complete = true;
    for (size_t i = 0; i < d.dims.size(); ++i) {
      if (d.dims[i] >= 0) {
        s.push_back(d.dims[i]);
        continue;
      }
      auto it = a.dims.find(i < d.dim_params.size() ? d.dim_params[i] : "");
      complete &= it != a.dims.end();
      s.push_back(it == a.dims.end() ? -1 : it->second);
    }
    ONYX_CHECK(complete, "input '", d.name, "' is ", d.type_str(), ": give --shape ", d.name,
               "=... or --dim for its symbols");
    a.shapes[d.name] = s;
  }
  PlanSummary p = session->plan(a.shapes);
  std::vector<const PlanSummary::Value*> largest;
  for (const auto& v : p.values)
    if (v.alias_of.empty()) largest.push_back(&v);  // one entry per storage
  std::stable_sort(largest.begin(), largest.end(), [](auto* x, auto* y) { return x->bytes > y->bytes; });
  if (largest.size() > a.top) largest.resize(a.top);
  if (a.json) print_json(path, p, largest);
  else print_text(path, a, p, largest);
  return 0;
}

}  // namespace onyx::cli
