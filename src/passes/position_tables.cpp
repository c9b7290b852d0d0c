#include "passes/position_tables.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "onyx/error.h"
#include "ops/compute.h"
#include "ops/registry.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

bool standard(const Node& n) { return n.domain.empty() || n.domain == "ai.onnx"; }

bool elementwise_unary(const std::string& op) {
  static const std::unordered_set<std::string> ops{"Cast",  "Identity", "Neg",  "Abs",     "Cos",  "Sin",
                                                   "Tan",   "Exp",      "Log",  "Sqrt",    "Reciprocal",
                                                   "Floor", "Ceil",     "Round", "Sign",   "Tanh", "Sigmoid",
                                                   "Erf",   "Relu"};
  return ops.count(op) > 0;
}

bool elementwise_binary(const std::string& op) {
  return op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow";
}

// Ops that only view their input (no kernel of their own).
bool view_op(const std::string& op) { return op == "Unsqueeze" || op == "Squeeze" || op == "Identity"; }

// A followed value's axes, outermost first: a feature of that size (>= 0), or axis i of the
// positions as -(i + 1).
using Layout = std::vector<int64_t>;
int64_t position_axis(size_t i) { return -static_cast<int64_t>(i) - 1; }
bool is_position(int64_t a) { return a < 0; }

// What the pass knows of a value it tracks:
//   kFollowed: each element depends on the positions at its position axes alone (its layout);
//   kSized: computed from the positions' shape and constants (Shape(positions) and its arithmetic),
//     not from their values;
//   kBroadcast: Expand(c, shape) of a constant c, read as c by a MatMul, whose batch axes broadcast.
//     Either the shape is kSized (that the expansion adds batch axes only is then checked by
//     computing the chain for two shapes of positions), or it is made elsewhere (torch.export
//     takes the batch from any input's shape, a past cache's) and is seen to have c's rank and
//     constant last two entries that keep c's last two dimensions: it can only expand MatMul's
//     batch axes, which the product broadcasts the same way from c.
enum class Kind { kFollowed, kSized, kBroadcast };
struct Tracked {
  Kind kind = Kind::kFollowed;
  Layout layout;  // kFollowed
  int of = -1;    // kBroadcast: the constant expanded
};

class Follower {
 public:
  Follower(const Graph& g, int positions, size_t rank) : g_(g) {
    Layout l;
    for (size_t i = 0; i < rank; ++i) l.push_back(position_axis(i));
    tracked_[positions] = {Kind::kFollowed, l, -1};
  }

  const Tracked* tracked(int id) const {
    auto it = tracked_.find(id);
    return it == tracked_.end() ? nullptr : &it->second;
  }
  const Layout* layout(int id) const {
    const Tracked* t = tracked(id);
    return t && t->kind == Kind::kFollowed ? &t->layout : nullptr;
  }

  const Tensor* constant(int id) const {
    return id >= 0 && !g_.values[id].is_input ? constant_value(g_, id) : nullptr;
  }

  // Tracks node n's outputs where it can (see the header); returns whether it did.
  bool follow(const Node& n) {
    if (!standard(n) || n.outputs.empty() || !n.implicit_inputs.empty()) return false;
    int followed = 0, sized = 0, broadcast = 0;
    for (int id : n.inputs) {
      if (id < 0) continue;
      const Tracked* t = tracked(id);
      if (!t) {
        if (!constant(id)) return false;
        continue;
      }
      (t->kind == Kind::kFollowed ? followed : t->kind == Kind::kSized ? sized : broadcast) += 1;
    }
    if (followed + sized + broadcast == 0) return false;
    const std::string& op = n.op_type;
    if (op == "Shape" && followed == 1 && n.outputs.size() == 1) return track(n.outputs[0], {Kind::kSized, {}, -1});
    if (followed == 0 && broadcast == 0) {  // shape arithmetic
      const OpDef* def = OpRegistry::global().find(n.domain, op, n.opset);
      if (!def || !def->foldable) return false;
      bool any = false;
      for (int o : n.outputs) any = track(o, {Kind::kSized, {}, -1}) || any;
      return any;
    }
    if (n.outputs.size() != 1 || n.outputs[0] < 0 || sized > 0) return false;
    if (broadcast > 0 && op != "MatMul") return false;
    std::optional<Layout> out = output_layout(n);
    if (!out) return false;
    return track(n.outputs[0], {Kind::kFollowed, std::move(*out), -1});
  }

  // Expand(c, shape) of a constant c by a sized shape: read as c by MatMul (see kBroadcast). Asked
  // before follow, which would take it for shape arithmetic.
  bool broadcast(const Node& n) {
    if (!standard(n) || n.op_type != "Expand" || n.inputs.size() != 2 || n.outputs.size() != 1 || n.outputs[0] < 0)
      return false;
    const Tensor* c = constant(n.inputs[0]);
    if (!c || n.inputs[1] < 0) return false;
    const Tracked* shape = tracked(n.inputs[1]);
    if (shape && shape->kind == Kind::kSized) return track(n.outputs[0], {Kind::kBroadcast, {}, n.inputs[0]});
    if (shape || c->rank() < 2) return false;
    const auto entries = shape_entries(n.inputs[1], 0);
    if (!entries || entries->size() != c->rank()) return false;
    for (size_t i = c->rank() - 2; i < c->rank(); ++i) {
      const std::optional<int64_t>& e = (*entries)[i];
      if (!e || (*e != 1 && *e != c->shape()[i])) return false;
    }
    return track(n.outputs[0], {Kind::kBroadcast, {}, n.inputs[0]});
  }


 private:
  bool track(int id, Tracked t) {
    if (id < 0) return false;
    tracked_[id] = std::move(t);
    return true;
  }

  // The entries of a 1-D shape value, each known (a constant) or not: a constant; a Concat of such
  // pieces; Shape(x) with constant start and end; Unsqueeze(Gather(Shape(x), i), [0]) of one index.
  std::optional<std::vector<std::optional<int64_t>>> shape_entries(int id, int depth) const {
    if (id < 0 || depth > 8) return std::nullopt;
    if (const Tensor* t = constant(id)) {
      if (t->rank() != 1 || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32)) return std::nullopt;
      std::vector<std::optional<int64_t>> out;
      for (int64_t v : t->to_int64_vector()) out.emplace_back(v);
      return out;
    }
    const int pr = g_.values[id].producer;
    if (pr < 0) return std::nullopt;
    const Node& n = g_.nodes[pr];
    if (!standard(n) || n.outputs.size() != 1) return std::nullopt;
    if (n.op_type == "Concat") {
      const Attribute* axis = n.find_attribute("axis");
      if (!axis || axis->i != 0) return std::nullopt;
      std::vector<std::optional<int64_t>> out;
      for (int in : n.inputs) {
        auto piece = shape_entries(in, depth + 1);
        if (!piece) return std::nullopt;
        out.insert(out.end(), piece->begin(), piece->end());
      }
      return out;
    }
    if (n.op_type == "Shape") {
      const Attribute* start = n.find_attribute("start");
      const Attribute* end = n.find_attribute("end");
      if (!start || !end || start->i < 0 || end->i < start->i) return std::nullopt;
      return std::vector<std::optional<int64_t>>(static_cast<size_t>(end->i - start->i));
    }
    if (n.op_type == "Unsqueeze" && !n.inputs.empty() && n.inputs[0] >= 0) {
      const auto axes = ints_of(n, 1, "axes");
      const int gp = g_.values[n.inputs[0]].producer;
      if (!axes || *axes != std::vector<int64_t>{0} || gp < 0) return std::nullopt;
      const Node& ga = g_.nodes[gp];
      const Tensor* index = ga.inputs.size() == 2 ? constant(ga.inputs[1]) : nullptr;
      const int sp = ga.inputs.empty() || ga.inputs[0] < 0 ? -1 : g_.values[ga.inputs[0]].producer;
      if (!standard(ga) || ga.op_type != "Gather" || !index || index->rank() != 0 || sp < 0 ||
          g_.nodes[sp].op_type != "Shape")
        return std::nullopt;
      return std::vector<std::optional<int64_t>>(1);
    }
    return std::nullopt;
  }

  std::optional<std::vector<int64_t>> ints_of(const Node& n, size_t input, const char* attr) const {
    if (n.inputs.size() > input && n.inputs[input] >= 0) {
      const Tensor* t = constant(n.inputs[input]);
      if (!t) return std::nullopt;
      return t->to_int64_vector();
    }
    if (const Attribute* a = n.find_attribute(attr)) return a->ints;
    return std::nullopt;
  }

  // An operand of a product or an elementwise op that is not followed: a constant's dimensions as
  // features (a kBroadcast value: the constant it expands).
  std::optional<Layout> fixed_dims(int id) const {
    const Tracked* t = tracked(id);
    const Tensor* c = constant(t && t->kind == Kind::kBroadcast ? t->of : id);
    if (!c) return std::nullopt;
    return c->shape().dims();
  }

  // Numpy broadcasting of a followed layout with fixed dimensions: a position axis meets only 1s.
  static std::optional<Layout> broadcast_layouts(const Layout& a, const Layout& b) {
    const size_t n = std::max(a.size(), b.size());
    Layout out(n);
    for (size_t i = 1; i <= n; ++i) {
      const bool ha = i <= a.size(), hb = i <= b.size();
      const int64_t x = ha ? a[a.size() - i] : 1, y = hb ? b[b.size() - i] : 1;
      int64_t& o = out[n - i];
      if (is_position(x) || is_position(y)) {
        if (is_position(x) && is_position(y) && x != y) return std::nullopt;
        if ((!is_position(x) && x != 1) || (!is_position(y) && y != 1)) return std::nullopt;
        o = is_position(x) ? x : y;
      } else if (x == y || y == 1) {
        o = x;
      } else if (x == 1) {
        o = y;
      } else {
        return std::nullopt;
      }
    }
    return out;
  }

  std::optional<Layout> output_layout(const Node& n) const {
    const std::string& op = n.op_type;
    const Layout* a = n.inputs.empty() || n.inputs[0] < 0 ? nullptr : layout(n.inputs[0]);
    if (elementwise_unary(op)) {
      if (n.inputs.size() != 1 || !a) return std::nullopt;
      return *a;
    }
    if (elementwise_binary(op)) {
      if (n.inputs.size() != 2 || n.inputs[1] < 0 || n.inputs[0] < 0) return std::nullopt;
      const Layout* b = layout(n.inputs[1]);
      if (a && b) {
        if (*a != *b) return std::nullopt;
        return *a;
      }
      const auto c = fixed_dims(a ? n.inputs[1] : n.inputs[0]);
      if (!c) return std::nullopt;
      return broadcast_layouts(a ? *a : *b, *c);
    }
    if (op == "Unsqueeze") {
      if (!a) return std::nullopt;
      const auto axes = ints_of(n, 1, "axes");
      if (!axes || axes->empty()) return std::nullopt;
      const int64_t out_rank = static_cast<int64_t>(a->size() + axes->size());
      std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
      for (int64_t x : *axes) {
        const int64_t k = x < 0 ? x + out_rank : x;
        if (k < 0 || k >= out_rank || inserted[static_cast<size_t>(k)]) return std::nullopt;
        inserted[static_cast<size_t>(k)] = true;
      }
      Layout out;
      size_t next = 0;
      for (int64_t k = 0; k < out_rank; ++k) out.push_back(inserted[static_cast<size_t>(k)] ? 1 : (*a)[next++]);
      return out;
    }
    if (op == "Squeeze") {
      if (!a) return std::nullopt;
      const auto axes = ints_of(n, 1, "axes");
      if (!axes || axes->empty()) return std::nullopt;  // without axes it could take a position axis of 1
      const int64_t in_rank = static_cast<int64_t>(a->size());
      std::vector<bool> gone(a->size(), false);
      for (int64_t x : *axes) {
        const int64_t k = x < 0 ? x + in_rank : x;
        if (k < 0 || k >= in_rank || (*a)[static_cast<size_t>(k)] != 1) return std::nullopt;
        gone[static_cast<size_t>(k)] = true;
      }
      Layout out;
      for (size_t i = 0; i < a->size(); ++i)
        if (!gone[i]) out.push_back((*a)[i]);
      return out;
    }
    if (op == "Transpose") {
      if (!a) return std::nullopt;
      std::vector<int64_t> perm;
      if (const Attribute* p = n.find_attribute("perm")) perm = p->ints;
      else
        for (size_t i = a->size(); i-- > 0;) perm.push_back(static_cast<int64_t>(i));
      if (perm.size() != a->size()) return std::nullopt;
      Layout out;
      std::vector<bool> used(a->size(), false);
      for (int64_t k : perm) {
        if (k < 0 || k >= static_cast<int64_t>(a->size()) || used[static_cast<size_t>(k)]) return std::nullopt;
        used[static_cast<size_t>(k)] = true;
        out.push_back((*a)[static_cast<size_t>(k)]);
      }
      return out;
    }
    if (op == "Concat") {
      const Attribute* axis_attr = n.find_attribute("axis");
      if (!axis_attr || n.inputs.empty()) return std::nullopt;
      std::optional<Layout> out;
      for (int id : n.inputs) {
        const Layout* f = id >= 0 ? layout(id) : nullptr;
        if (!f) return std::nullopt;  // a constant would have to span the positions
        const int64_t rank = static_cast<int64_t>(f->size());
        const int64_t k = axis_attr->i < 0 ? axis_attr->i + rank : axis_attr->i;
        if (k < 0 || k >= rank || is_position((*f)[static_cast<size_t>(k)])) return std::nullopt;
        if (!out) {
          out = *f;
          continue;
        }
        if (f->size() != out->size()) return std::nullopt;
        for (size_t i = 0; i < f->size(); ++i)
          if (static_cast<int64_t>(i) != k && (*f)[i] != (*out)[i]) return std::nullopt;
        (*out)[static_cast<size_t>(k)] += (*f)[static_cast<size_t>(k)];
      }
      return out;
    }
    if (op == "MatMul") {
      // One operand followed, the other fixed; the sum runs over a feature axis, so each output
      // element reads the followed operand at one position.
      if (n.inputs.size() != 2 || n.inputs[0] < 0 || n.inputs[1] < 0) return std::nullopt;
      const Layout* b = layout(n.inputs[1]);
      if ((a != nullptr) == (b != nullptr)) return std::nullopt;
      const auto fixed = fixed_dims(a ? n.inputs[1] : n.inputs[0]);
      if (!fixed) return std::nullopt;
      const Layout& la = a ? *a : *fixed;
      const Layout& lb = b ? *b : *fixed;
      if (la.size() < 2 || lb.size() < 2) return std::nullopt;
      const int64_t ka = la.back(), kb = lb[lb.size() - 2];
      if (is_position(ka) || is_position(kb) || ka != kb) return std::nullopt;
      auto batch = broadcast_layouts(Layout(la.begin(), la.end() - 2), Layout(lb.begin(), lb.end() - 2));
      if (!batch) return std::nullopt;
      batch->push_back(la[la.size() - 2]);
      batch->push_back(lb.back());
      return batch;
    }
    return std::nullopt;
  }

  const Graph& g_;
  std::unordered_map<int, Tracked> tracked_;
};

// The positions for computing the chain: 0, 1, ..., count - 1 as one row (`table`), or a few
// spread over [0, count) in another shape (2, 3, ... along the axes) to check the tables against.
Tensor positions_tensor(DType dtype, size_t rank, int64_t count, bool table) {
  std::vector<int64_t> dims(rank, 1);
  if (table) dims.back() = count;
  else
    for (size_t i = 0; i < rank; ++i) dims[i] = static_cast<int64_t>(i) + 2;
  Tensor t(dtype, Shape(dims));
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t v = i;
    if (!table) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      v = i == 0 ? count - 1 : i == 1 ? 0 : static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(count));
    }
    if (dtype == DType::kInt64) t.data<int64_t>()[i] = v;
    else t.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  return t;
}

}  // namespace

PositionTableReport tabulate_positions(Graph& g, const std::string& positions, int64_t count, size_t max_bytes) {
  PositionTableReport r;
  const int p = g.find_value(positions);
  if (p < 0 || !g.values[p].is_input) {
    r.why_not = cat("the graph has no input '", positions, "'");
    return r;
  }
  const TypeInfo& pt = g.values[p].declared;
  if (!(pt.dtype == DType::kInt64 || pt.dtype == DType::kInt32) || !pt.rank_known || pt.dims.empty()) {
    r.why_not = cat("the positions '", positions, "' are ", pt.str(), ", not an integer tensor of known rank");
    return r;
  }
  if (count <= 0) {
    r.why_not = "no bound on the positions";
    return r;
  }
  const size_t rank = pt.dims.size();

  // The chain: the nodes, in graph order, whose outputs the pass tracks.
  Follower follower(g, p, rank);
  std::vector<size_t> chain;
  std::vector<bool> in_chain(g.nodes.size(), false);
  std::unordered_map<int, size_t> producer;  // tracked value -> its chain node
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!follower.broadcast(n) && !follower.follow(n)) continue;
    chain.push_back(k);
    in_chain[k] = true;
    for (int o : n.outputs)
      if (o >= 0) producer[o] = k;
  }

  // What the chain hands to the rest of the graph.
  const std::unordered_set<int> pinned = pinned_values(g);
  std::unordered_set<int> read_outside;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (in_chain[k]) continue;
    for (int id : g.nodes[k].inputs) read_outside.insert(id);
    for (int id : g.nodes[k].implicit_inputs) read_outside.insert(id);
  }
  auto upstream = [&](int v) {
    std::vector<size_t> nodes;
    std::vector<int> pending{v};
    std::unordered_set<size_t> seen;
    while (!pending.empty()) {
      const int id = pending.back();
      pending.pop_back();
      auto it = producer.find(id);
      if (it == producer.end() || !seen.insert(it->second).second) continue;
      nodes.push_back(it->second);
      for (int in : g.nodes[it->second].inputs)
        if (in >= 0) pending.push_back(in);
    }
    return nodes;
  };
  // A chain node's kernel: a followed value's, not a view's; an Expand's. (Shape arithmetic is
  // computed while planning.)
  auto launches = [&](size_t k) {
    const Node& n = g.nodes[k];
    const Tracked* t = follower.tracked(n.outputs[0]);
    return t && (t->kind == Kind::kBroadcast || (t->kind == Kind::kFollowed && !view_op(n.op_type)));
  };
  // The positions' axes first, in order: a Gather of the table's rows by the positions.
  auto gatherable = [&](int v) {
    const Layout* l = follower.layout(v);
    bool front = l != nullptr && l->size() >= rank;
    for (size_t i = 0; front && i < rank; ++i) front = (*l)[i] == position_axis(i);
    for (size_t i = rank; front && i < l->size(); ++i) front = !is_position((*l)[i]);
    return front;
  };
  std::vector<int> tabulate, keep;
  for (size_t k : chain)
    for (int v : g.nodes[k].outputs) {
      if (v < 0 || (!read_outside.count(v) && !pinned.count(v))) continue;
      // A view of a gatherable value (the rotary tables unsqueezed for the heads): that value's
      // table, the view kept.
      int u = v;
      while (!gatherable(u) && follower.layout(u) && producer.count(u)) {
        const Node& n = g.nodes[producer.at(u)];
        if (!view_op(n.op_type) || n.inputs.empty() || n.inputs[0] < 0 || !follower.layout(n.inputs[0])) break;
        u = n.inputs[0];
      }
      const auto up = upstream(u);
      const bool computes = std::any_of(up.begin(), up.end(), launches);
      if (!gatherable(u) || !computes) keep.push_back(v);
      else if (std::find(tabulate.begin(), tabulate.end(), u) == tabulate.end()) tabulate.push_back(u);
    }
  if (tabulate.empty()) {
    r.why_not = "nothing is computed from the positions alone";
    return r;
  }
  // The chain's kernels that the tables take away (those nothing kept needs) against the Gathers.
  std::unordered_set<size_t> kept_nodes, needed;
  for (int v : keep)
    for (size_t u : upstream(v)) kept_nodes.insert(u);
  for (int v : tabulate)
    for (size_t u : upstream(v)) needed.insert(u);
  int saved = 0;
  for (size_t u : needed)
    if (!kept_nodes.count(u) && launches(u)) ++saved;
  if (saved <= static_cast<int>(tabulate.size())) {
    r.why_not = cat("the chain from the positions runs ", saved, " kernels for ", tabulate.size(),
                    " values: tables would not save any");
    return r;
  }
  size_t elements = 0;
  for (int v : tabulate) {
    int64_t e = count;
    for (size_t i = rank; i < follower.layout(v)->size(); ++i) e *= (*follower.layout(v))[i];
    elements += static_cast<size_t>(e);
  }
  if (elements * 2 > max_bytes) {  // before computing: at least 2 bytes an element, whatever the type
    r.why_not = cat("tables of ", elements, " elements for ", count, " positions would pass ", max_bytes, " bytes");
    return r;
  }

  // The chain computed on the CPU for positions 0, 1, ..., count - 1 as one row (the tables), and
  // for a few positions in another shape (the check).
  auto compute = [&](const Tensor& pos, std::unordered_map<int, Tensor>& env) -> std::string {
    env[p] = pos;
    auto alloc = make_cpu_allocator();
    alloc->set_budget(4 * max_bytes + (size_t{64} << 20));  // a chain's intermediates: the tables' size, a few times
    for (size_t k : chain) {
      if (!needed.count(k)) continue;
      Node n = g.nodes[k];
      // An Expand read as its constant whose shape comes from outside the chain: the constant.
      if (const Tracked* t = follower.tracked(n.outputs[0]);
          t && t->kind == Kind::kBroadcast && n.inputs.size() == 2 && !env.count(n.inputs[1]) &&
          !follower.constant(n.inputs[1])) {
        env[n.outputs[0]] = *follower.constant(t->of);
        continue;
      }
      n.def = OpRegistry::global().find(n.domain, n.op_type, n.opset);
      if (!n.def) return cat(n.describe(), " has no CPU kernel");
      std::vector<const Tensor*> in;
      for (int id : n.inputs) {
        auto it = env.find(id);
        in.push_back(id < 0 ? nullptr : it != env.end() ? &it->second : follower.constant(id));
      }
      std::vector<Tensor> out;
      try {
        out = compute_node(n, in, *alloc);
      } catch (const Error& e) {
        return cat(n.describe(), ": ", e.what());
      }
      for (size_t o = 0; o < n.outputs.size() && o < out.size(); ++o)
        if (n.outputs[o] >= 0) env[n.outputs[o]] = out[o];
    }
    return "";
  };
  auto failed = [&](const Tensor& pos, const std::string& why) {
    r.why_not = cat("the chain from the positions does not compute for positions of shape ", pos.shape().str(), ": ", why);
    return r;
  };
  std::unordered_map<int, Tensor> all, some;
  const Tensor all_positions = positions_tensor(pt.dtype, rank, count, true);
  if (std::string why = compute(all_positions, all); !why.empty()) return failed(all_positions, why);
  std::vector<std::pair<int, Tensor>> tables;
  std::vector<std::vector<int64_t>> rows;  // each table's row shape
  for (int v : tabulate) {
    const Layout& l = *follower.layout(v);
    std::vector<int64_t> want(rank, 1), row;
    want.back() = count;
    for (size_t i = rank; i < l.size(); ++i) row.push_back(l[i]);
    want.insert(want.end(), row.begin(), row.end());
    const Tensor& t = all.at(v);
    if (t.shape() != Shape(want)) {
      r.why_not = cat("'", g.values[v].name, "' came out ", t.shape().str(), " for the positions 0-", count - 1,
                      " as one row, not ", Shape(want).str());
      return r;
    }
    std::vector<int64_t> table_shape{count};
    table_shape.insert(table_shape.end(), row.begin(), row.end());
    tables.emplace_back(v, t.view(Shape(table_shape)).clone());
    rows.push_back(row);
  }
  all.clear();
  // The check: the chain at other positions, in another shape, gives the tables' rows there.
  const Tensor some_positions = positions_tensor(pt.dtype, rank, count, false);
  if (std::string why = compute(some_positions, some); !why.empty()) return failed(some_positions, why);
  size_t bytes = 0;
  for (size_t i = 0; i < tables.size(); ++i) {
    const auto& [v, table] = tables[i];
    const Tensor& other = some.at(v);
    std::vector<int64_t> other_shape = some_positions.shape().dims();
    other_shape.insert(other_shape.end(), rows[i].begin(), rows[i].end());
    if (other.shape() != Shape(other_shape) || other.dtype() != table.dtype()) {
      r.why_not = cat("'", g.values[v].name, "' came out ", other.type_str(), " for positions ",
                      some_positions.shape().str(), ", not ", dtype_name(table.dtype()), Shape(other_shape).str());
      return r;
    }
    const int64_t width = table.numel() / count;
    const double tol = dtype_size(table.dtype()) <= 2 ? 1e-2 : 1e-5;
    for (int64_t j = 0; j < some_positions.numel(); ++j) {
      const int64_t at = some_positions.get_as_int64(j);
      for (int64_t e = 0; e < width; ++e) {
        const double want_v = table.get_as_double(at * width + e), got_v = other.get_as_double(j * width + e);
        if (!(std::abs(want_v - got_v) <= tol * std::max(1.0, std::abs(want_v)))) {
          r.why_not = cat("'", g.values[v].name, "' at position ", at, " is ", got_v, " in a batch of positions ",
                          some_positions.shape().str(), " and ", want_v, " in one row: not a function of each position alone");
          return r;
        }
      }
    }
    bytes += table.bytes();
  }
  if (bytes > max_bytes) {
    r.why_not = cat("tables of ", bytes, " bytes for ", count, " positions would pass ", max_bytes, " bytes");
    return r;
  }

  // Each tabulated value's producer becomes Gather(table, positions); the rest of the chain is
  // left with no reader and goes.
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;
  for (auto& [v, table] : tables) {
    const size_t k = producer.at(v);
    const int t = add_initializer(g, g.values[v].name + "/onyx_position_table", std::move(table));
    replace.emplace_back(k, make_node(g.nodes[k].name + "/onyx_position_table", "", "Gather", 13, {t, p}, {v},
                                      {make_int_attr("axis", 0)}));
    removed[k] = true;
  }
  replace_nodes(g, removed, replace);
  r.tables = static_cast<int>(tables.size());
  r.nodes = static_cast<int>(tables.size()) + drop_dead_nodes(g);
  r.bytes = bytes;
  return r;
}

}  // namespace onyx
