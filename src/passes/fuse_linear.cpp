#include "passes/fuse_linear.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ops/gate_activation.h"
#include "passes/pattern_match.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

bool plain(const Node& n, const char* op) { return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx"); }

bool linear_dtype(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16 || d == DType::kFloat64;
}

bool weight_2d(const Tensor* t) { return t && t->on_host() && t->rank() == 2 && linear_dtype(t->dtype()); }

// [rows, cols] -> [cols, rows], in tiles so that both sides stay in cache, moving elements as
// unsigned integers of their size.
template <class U>
void transpose_tiles(const U* src, U* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile)
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t c = c0; c < c1; ++c)
        for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
    }
}

Tensor transposed(const Tensor& t) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  Tensor out(t.dtype(), Shape({cols, rows}));
  switch (dtype_size(t.dtype())) {
    case 2: transpose_tiles(static_cast<const uint16_t*>(t.raw()), static_cast<uint16_t*>(out.raw()), rows, cols); break;
    case 4: transpose_tiles(static_cast<const uint32_t*>(t.raw()), static_cast<uint32_t*>(out.raw()), rows, cols); break;
    case 8: transpose_tiles(static_cast<const uint64_t*>(t.raw()), static_cast<uint64_t*>(out.raw()), rows, cols); break;
    default: ONYX_ASSERT(false, "no transposition for elements of ", dtype_size(t.dtype()), " bytes");
  }
  return out;
}

// The weights stacked by rows: [sum N_i, K].
Tensor stacked(const std::vector<const Tensor*>& ws) {
  int64_t n = 0;
  for (const Tensor* w : ws) n += w->shape()[0];
  Tensor out(ws[0]->dtype(), Shape({n, ws[0]->shape()[1]}));
  char* dst = static_cast<char*>(out.raw());
  for (const Tensor* w : ws) {
    std::memcpy(dst, w->raw(), w->bytes());
    dst += w->bytes();
  }
  return out;
}

std::unordered_map<int, int> count_readers(const Graph& g) {
  std::unordered_map<int, int> readers;
  for (const auto& n : g.nodes) {
    for (int id : n.inputs)
      if (id >= 0) ++readers[id];
    for (int id : n.implicit_inputs) ++readers[id];
  }
  for (int id : g.outputs) ++readers[id];
  return readers;
}

// A Linear of one output (no splits) and its weight.
struct Single {
  size_t node;
  int x, w, out;
};

std::optional<Single> single_linear(const Graph& g, size_t k) {
  const Node& n = g.nodes[k];
  if (n.op_type != "Linear" || n.domain != "onyx" || n.inputs.size() != 2 || n.outputs.size() != 1) return std::nullopt;
  if (const Attribute* s = n.find_attribute("splits"); s && s->ints.size() > 1) return std::nullopt;
  if (!weight_2d(constant_value(g, n.inputs[1]))) return std::nullopt;
  return Single{k, n.inputs[0], n.inputs[1], n.outputs[0]};
}

// The producers of a SiluMul's gate and up inputs (nodes k), two distinct nodes not removed, or
// nullopt where node k is no onyx::SiluMul of two inputs.
std::optional<std::pair<size_t, size_t>> silu_mul_producers(const Graph& g, size_t k, const std::vector<bool>& removed) {
  const Node& sm = g.nodes[k];
  if (sm.op_type != "SiluMul" || sm.domain != "onyx" || sm.inputs.size() != 2 || sm.outputs.size() != 1)
    return std::nullopt;
  const int gp = sm.inputs[0] >= 0 ? g.values[sm.inputs[0]].producer : -1;
  const int up = sm.inputs[1] >= 0 ? g.values[sm.inputs[1]].producer : -1;
  if (gp < 0 || up < 0 || gp == up || removed[gp] || removed[up]) return std::nullopt;
  return std::pair<size_t, size_t>{static_cast<size_t>(gp), static_cast<size_t>(up)};
}

// A gated MLP's product at node k: the producers of its gate and up inputs, the activation node
// between the gate's product and node k (none for SiluMul), and the activation. Node k is an
// onyx::SiluMul(gate, up), or Mul(act(gate), up) in either order with act a GELU whose output
// node k alone reads: com.microsoft FastGelu (no bias) or Gelu, or ai.onnx Gelu (approximate
// "tanh" or "none").
struct GatedMul {
  size_t gate, up;
  int act_node;  // -1 for SiluMul
  GateActivation act;
};

std::optional<GatedMul> gated_mul(const Graph& g, size_t k, const std::vector<bool>& removed,
                                  const std::unordered_map<int, int>& readers) {
  if (auto pr = silu_mul_producers(g, k, removed)) return GatedMul{pr->first, pr->second, -1, GateActivation::kSilu};
  const Node& mul = g.nodes[k];
  if (!plain(mul, "Mul") || mul.inputs.size() != 2 || mul.outputs.size() != 1) return std::nullopt;
  auto producer = [&](int id) { return id >= 0 ? g.values[id].producer : -1; };
  for (int side = 0; side < 2; ++side) {
    const int a = producer(mul.inputs[side]), up = producer(mul.inputs[1 - side]);
    if (a < 0 || up < 0 || removed[a] || removed[up] || readers.at(mul.inputs[side]) != 1) continue;
    const Node& an = g.nodes[a];
    if (an.outputs.size() != 1 || an.inputs.empty() || an.inputs[0] < 0) continue;
    std::optional<GateActivation> act;
    if (an.domain == "com.microsoft" && an.op_type == "FastGelu" && (an.inputs.size() == 1 || an.inputs[1] < 0))
      act = GateActivation::kGeluTanh;
    else if (an.domain == "com.microsoft" && an.op_type == "Gelu" && an.inputs.size() == 1)
      act = GateActivation::kGelu;
    else if (plain(an, "Gelu") && an.inputs.size() == 1) {
      const Attribute* ap = an.find_attribute("approximate");
      const std::string approx = ap ? ap->s : "none";
      if (approx == "tanh") act = GateActivation::kGeluTanh;
      else if (approx == "none") act = GateActivation::kGelu;
    }
    const int gp = producer(an.inputs[0]);
    if (!act || gp < 0 || removed[gp] || gp == up) continue;
    return GatedMul{static_cast<size_t>(gp), static_cast<size_t>(up), a, *act};
  }
  return std::nullopt;
}

}  // namespace

LinearReport linear_from_matmul(Graph& g) {
  LinearReport r;
  auto readers = count_readers(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;
  std::vector<int> replaced_weights;
  std::unordered_map<int, int> transposed_of;  // a [K, N] weight -> its [N, K] copy, made once
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& mm = g.nodes[k];
    if (!plain(mm, "MatMul") || mm.inputs.size() != 2 || mm.outputs.size() != 1 || mm.inputs[0] < 0) continue;
    const int b = mm.inputs[1];
    int w = -1;
    const int tp = b >= 0 ? g.values[b].producer : -1;
    if (const Tensor* bt = constant_value(g, b); weight_2d(bt)) {
      auto it = transposed_of.find(b);
      if (it == transposed_of.end()) {
        Tensor t = transposed(*bt);
        r.weight_bytes += t.bytes();
        it = transposed_of.emplace(b, add_initializer(g, g.values[b].name + "/transposed", std::move(t))).first;
        replaced_weights.push_back(b);
        ++r.transposed;
      }
      w = it->second;
    } else if (tp >= 0 && plain(g.nodes[tp], "Transpose") && g.nodes[tp].inputs.size() == 1 &&
               weight_2d(constant_value(g, g.nodes[tp].inputs[0]))) {
      const Attribute* perm = g.nodes[tp].find_attribute("perm");
      if (perm && perm->ints != std::vector<int64_t>{1, 0}) continue;
      w = g.nodes[tp].inputs[0];  // MatMul(x, W^T) = Linear(x, W): the weight as stored
      if (--readers[b] == 0) removed[static_cast<size_t>(tp)] = true;
    } else {
      continue;
    }
    replace.emplace_back(k, make_node(mm.name + "/linear", "onyx", "Linear", 1, {mm.inputs[0], w}, {mm.outputs[0]}));
    removed[k] = true;
    ++r.linears;
  }
  replace_nodes(g, removed, replace);
  drop_unread_initializers(g, replaced_weights);
  return r;
}

namespace {

// The rows [begin, end) of the weight a reader of a Linear's output takes along its last axis:
// one per output of a Split, one for a Slice; nullopt where the reader is neither with constant
// bounds (step 1), or cuts another axis.
std::optional<std::vector<std::pair<int64_t, int64_t>>> last_axis_cuts(const rewrite::Matcher& m, const Node& n,
                                                                      int data, int rank, int64_t width) {
  if (n.inputs.empty() || n.inputs[0] != data) return std::nullopt;
  auto last = [&](int64_t axis) { return axis == -1 || (rank > 0 && axis == rank - 1); };
  std::vector<std::pair<int64_t, int64_t>> cuts;
  if (m.plain(n, "Slice")) {
    if (n.inputs.size() < 3 || n.outputs.size() != 1) return std::nullopt;
    const auto starts = m.ints(n.inputs[1]), ends = m.ints(n.inputs[2]);
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (n.inputs.size() > 3 && n.inputs[3] >= 0) {
      const auto axes = m.ints(n.inputs[3]);
      if (!axes || axes->size() != 1 || !last((*axes)[0])) return std::nullopt;
    } else if (rank != 1) {
      return std::nullopt;  // no axes: axis 0
    }
    if (n.inputs.size() > 4 && n.inputs[4] >= 0) {
      const auto steps = m.ints(n.inputs[4]);
      if (!steps || steps->size() != 1 || (*steps)[0] != 1) return std::nullopt;
    }
    auto clamp = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + width : v, 0, width); };
    cuts.emplace_back(clamp((*starts)[0]), clamp((*ends)[0]));
  } else if (m.plain(n, "Split")) {
    if (!last(rewrite::Matcher::attr_int(n, "axis", 0))) return std::nullopt;
    std::vector<int64_t> sizes;
    if (n.inputs.size() > 1 && n.inputs[1] >= 0) {
      const auto s = m.ints(n.inputs[1]);
      if (!s) return std::nullopt;
      sizes = *s;
    } else if (const Attribute* a = n.find_attribute("split"); a && a->kind == Attribute::Kind::kInts) {
      sizes = a->ints;
    } else {
      // Equal parts (num_outputs, or one per output), the last one smaller where they do not divide.
      const int64_t parts = rewrite::Matcher::attr_int(n, "num_outputs", static_cast<int64_t>(n.outputs.size()));
      if (parts < 1 || parts != static_cast<int64_t>(n.outputs.size())) return std::nullopt;
      const int64_t each = (width + parts - 1) / parts;
      for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::min(each, width - i * each));
    }
    if (sizes.size() != n.outputs.size()) return std::nullopt;
    int64_t at = 0;
    for (int64_t size : sizes) {
      if (size < 0) return std::nullopt;
      cuts.emplace_back(at, at + size);
      at += size;
    }
    if (at != width) return std::nullopt;
  } else {
    return std::nullopt;
  }
  return cuts;
}

// Rows [begin, end) of a [N, K] weight.
Tensor weight_rows(const Tensor& w, int64_t begin, int64_t end) {
  const int64_t k = w.shape()[1];
  Tensor out(w.dtype(), Shape({end - begin, k}));
  const size_t row = static_cast<size_t>(k) * dtype_size(w.dtype());
  std::memcpy(out.raw(), static_cast<const char*>(w.raw()) + static_cast<size_t>(begin) * row,
              static_cast<size_t>(end - begin) * row);
  return out;
}

}  // namespace

LinearReport split_sliced_linears(Graph& g) {
  LinearReport r;
  rewrite::Matcher m(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;
  std::vector<int> replaced_weights;
  std::vector<std::vector<size_t>> readers_of(g.values.size());
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int id : g.nodes[k].inputs)
      if (id >= 0) readers_of[static_cast<size_t>(id)].push_back(k);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const auto lin = single_linear(g, k);
    if (!lin || m.outputs.count(lin->out)) continue;
    const Tensor* w = constant_value(g, lin->w);
    const int64_t width = w->shape()[0];
    const int rank = m.rank(lin->x);
    const std::vector<size_t>& readers = readers_of[static_cast<size_t>(lin->out)];
    if (readers.empty() || static_cast<size_t>(m.readers[lin->out]) != readers.size()) continue;
    // Every reader cuts the output along its last axis; the cuts do not overlap.
    std::vector<std::tuple<int64_t, int64_t, int>> parts;  // rows, and the value they make
    bool ok = true;
    for (size_t rd : readers) {
      const Node& n = g.nodes[rd];
      const auto cuts = removed[rd] ? std::nullopt : last_axis_cuts(m, n, lin->out, rank, width);
      if (!cuts) {
        ok = false;
        break;
      }
      for (size_t i = 0; i < cuts->size(); ++i)
        if (n.outputs[i] >= 0) parts.emplace_back((*cuts)[i].first, (*cuts)[i].second, n.outputs[i]);
    }
    if (!ok || parts.empty()) continue;
    std::sort(parts.begin(), parts.end());
    for (size_t i = 0; i < parts.size() && ok; ++i)
      ok = std::get<0>(parts[i]) < std::get<1>(parts[i]) && (i == 0 || std::get<1>(parts[i - 1]) <= std::get<0>(parts[i]));
    if (!ok) continue;
    // One Linear per cut, at the product's place (its readers come after it).
    for (const auto& [begin, end, out] : parts) {
      const int wid = add_initializer(g, cat(g.values[lin->w].name, "/rows_", begin, "_", end), weight_rows(*w, begin, end));
      r.weight_bytes += static_cast<size_t>(end - begin) * static_cast<size_t>(w->shape()[1]) * dtype_size(w->dtype());
      replace.emplace_back(k, make_node(cat(g.nodes[k].name, "/rows_", begin, "_", end), "onyx", "Linear", 1,
                                        {lin->x, wid}, {out}));
    }
    removed[k] = true;
    for (size_t rd : readers) removed[rd] = true;
    replaced_weights.push_back(lin->w);
    ++r.sliced;
  }
  replace_nodes(g, removed, replace);
  drop_unread_initializers(g, replaced_weights);
  return r;
}

LinearReport group_linears(Graph& g) {
  LinearReport r;
  std::vector<int> replaced_weights;
  {
    // SiluMul(Linear(x, Wg), Linear(x, Wu)) -> SiluGateLinear(x, [Wg; Wu]), and the GELU-gated
    // form Mul(Gelu(Linear(x, Wg)), Linear(x, Wu)) -> SiluGateLinear(x, [Wg; Wu]; activation).
    auto readers = count_readers(g);
    std::vector<bool> removed(g.nodes.size(), false);
    std::vector<std::pair<size_t, Node>> replace;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const auto gm = gated_mul(g, k, removed, readers);
      if (!gm) continue;
      const Node& sm = g.nodes[k];
      const size_t gp = gm->gate, up = gm->up;
      const auto gl = single_linear(g, gp), ul = single_linear(g, up);
      if (!gl || !ul || gl->x != ul->x || readers[gl->out] != 1 || readers[ul->out] != 1) continue;
      const Tensor* wg = constant_value(g, gl->w);
      const Tensor* wu = constant_value(g, ul->w);
      if (!(wg->shape() == wu->shape()) || wg->dtype() != wu->dtype()) continue;
      Tensor w = stacked({wg, wu});
      r.weight_bytes += w.bytes();
      const int wid = add_initializer(g, g.values[gl->w].name + "/gate_up", std::move(w));
      replaced_weights.insert(replaced_weights.end(), {gl->w, ul->w});
      std::vector<Attribute> attrs;
      if (gm->act != GateActivation::kSilu) attrs.push_back(make_string_attr("activation", gate_activation_name(gm->act)));
      replace.emplace_back(k, make_node(sm.name + "/silu_gate_linear", "onyx", "SiluGateLinear", 1, {gl->x, wid},
                                        {sm.outputs[0]}, std::move(attrs)));
      removed[k] = removed[gp] = removed[up] = true;
      if (gm->act_node >= 0) removed[static_cast<size_t>(gm->act_node)] = true;
      ++r.gated;
    }
    replace_nodes(g, removed, replace);
  }
  {
    // Linears reading the same x (and weights of one dtype) -> one Linear with splits, at the
    // place of the first: its inputs are x and constants, and every reader of an output comes
    // after the member that made it.
    std::map<std::tuple<int, DType, int64_t>, std::vector<Single>> by_input;
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (auto s = single_linear(g, k)) {
        const Tensor* w = constant_value(g, s->w);
        by_input[{s->x, w->dtype(), w->shape()[1]}].push_back(*s);
      }
    std::vector<bool> removed(g.nodes.size(), false);
    std::vector<std::pair<size_t, Node>> replace;
    for (auto& [key, members] : by_input) {
      if (members.size() < 2) continue;
      std::vector<const Tensor*> ws;
      std::vector<int64_t> splits;
      std::vector<int> outs;
      for (const Single& s : members) {
        ws.push_back(constant_value(g, s.w));
        splits.push_back(ws.back()->shape()[0]);
        outs.push_back(s.out);
        replaced_weights.push_back(s.w);
        removed[s.node] = true;
      }
      Tensor w = stacked(ws);
      r.weight_bytes += w.bytes();
      const int wid = add_initializer(g, g.values[members[0].w].name + "/stacked", std::move(w));
      const Node& first = g.nodes[members[0].node];
      replace.emplace_back(members[0].node, make_node(first.name + "/grouped", "onyx", "Linear", 1,
                                                      {members[0].x, wid}, std::move(outs),
                                                      {make_ints_attr("splits", std::move(splits))}));
      ++r.groups;
      r.grouped += static_cast<int>(members.size());
    }
    replace_nodes(g, removed, replace);
  }
  drop_unread_initializers(g, replaced_weights);
  return r;
}

LinearReport norm_into_linear(Graph& g) {
  LinearReport r;
  auto readers = count_readers(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& lin = g.nodes[k];
    const bool nbits = lin.op_type == "LinearNBits";
    const bool gated = lin.op_type == "SiluGateLinear" || (nbits && lin.find_attribute("gated"));
    if (lin.domain != "onyx") continue;
    if (nbits ? lin.inputs.size() < 3 || lin.inputs.size() > 4 : (lin.op_type != "Linear" && !gated) || lin.inputs.size() != 2)
      continue;
    const int x = lin.inputs[0];
    const int np = x >= 0 ? g.values[x].producer : -1;
    if (np < 0 || removed[np] || readers[x] != 1) continue;
    const Node& norm = g.nodes[np];
    if (norm.outputs.empty() || norm.outputs[0] != x) continue;  // the normalized rows, not the sum
    // The weight's dtype and K: a dense [N, K] weight's, or the 4-bit product's scales' and K.
    DType w_dtype = DType::kUndefined;
    int64_t w_k = -1;
    if (nbits) {
      const Tensor* sc = constant_value(g, lin.inputs[2]);
      const Attribute* ka = lin.find_attribute("K");
      if (!sc || !ka) continue;
      w_dtype = sc->dtype();
      w_k = ka->i;
    } else {
      const Tensor* w = constant_value(g, lin.inputs[1]);
      if (!w || w->rank() != 2) continue;
      w_dtype = w->dtype();
      w_k = w->shape()[1];
    }
    int in = -1, skip = -1, gamma = -1, sum = -1;
    float eps = 1e-5f;
    if (norm.op_type == "SkipSimplifiedLayerNormalization" && norm.domain == "com.microsoft" &&
        norm.inputs.size() == 3 && norm.outputs.size() >= 1) {
      bool stats_read = false;
      for (size_t o = 1; o < 3 && o < norm.outputs.size(); ++o)
        if (norm.outputs[o] >= 0 && readers[norm.outputs[o]] > 0) stats_read = true;
      if (stats_read) continue;
      in = norm.inputs[0];
      skip = norm.inputs[1];
      gamma = norm.inputs[2];
      sum = norm.outputs.size() > 3 ? norm.outputs[3] : -1;
      const Attribute* e = norm.find_attribute("epsilon");
      eps = e ? e->f : 1e-12f;
    } else if (norm.op_type == "SimplifiedLayerNormalization" && (norm.domain.empty() || norm.domain == "ai.onnx") &&
               norm.inputs.size() == 2) {
      const Attribute* axis = norm.find_attribute("axis");
      if (axis && axis->i != -1) continue;
      if (norm.outputs.size() > 1 && norm.outputs[1] >= 0 && readers[norm.outputs[1]] > 0) continue;
      in = norm.inputs[0];
      gamma = norm.inputs[1];
      // The norm's output has the scale's dtype: fuse only where x has it too.
      const Tensor* gt = constant_value(g, gamma);
      if (!gt || traced_dtype(g, in) != gt->dtype()) continue;
      const Attribute* e = norm.find_attribute("epsilon");
      eps = e ? e->f : 1e-5f;
    } else {
      continue;
    }
    const Tensor* gt = constant_value(g, gamma);
    if (!gt || gt->rank() != 1 || gt->dtype() != w_dtype || gt->shape()[0] != w_k) continue;
    std::vector<int> outs{sum};
    outs.insert(outs.end(), lin.outputs.begin(), lin.outputs.end());
    std::vector<Attribute> attrs{make_float_attr("epsilon", eps)};
    if (nbits) {
      for (const Attribute& a : lin.attributes) attrs.push_back(a);  // K, N, bits, ..., splits or gated
      std::vector<int> ins{in, skip, gamma};
      ins.insert(ins.end(), lin.inputs.begin() + 1, lin.inputs.end());
      replace.emplace_back(np, make_node(lin.name + "/rms_norm", "onyx", "RmsNormLinearNBits", 1, std::move(ins),
                                         std::move(outs), std::move(attrs)));
    } else {
      if (gated) attrs.push_back(make_int_attr("gated", 1));
      if (const Attribute* s = lin.find_attribute("splits")) attrs.push_back(*s);
      if (const Attribute* a = lin.find_attribute("activation")) attrs.push_back(*a);
      replace.emplace_back(np, make_node(lin.name + "/rms_norm", "onyx", "RmsNormLinear", 1,
                                         {in, skip, gamma, lin.inputs[1]}, std::move(outs), std::move(attrs)));
    }
    removed[np] = removed[k] = true;
    ++r.normed;
  }
  replace_nodes(g, removed, replace);
  return r;
}

namespace {

// `ts` concatenated along dimension 0 (their other dimensions equal): bytes in order.
Tensor concat_rows(const std::vector<const Tensor*>& ts) {
  Shape s = ts[0]->shape();
  int64_t rows = 0;
  for (const Tensor* t : ts) rows += t->shape()[0];
  s[0] = rows;
  Tensor out(ts[0]->dtype(), s);
  char* dst = static_cast<char*>(out.raw());
  for (const Tensor* t : ts) {
    std::memcpy(dst, t->raw(), t->bytes());
    dst += t->bytes();
  }
  return out;
}

struct NBitsMember {
  size_t node;
  int64_t n;
};

}  // namespace

LinearReport group_nbits(Graph& g) {
  LinearReport r;
  // A candidate's key: A and the weights' layout (K, bits, block size, accuracy level, and the
  // types and per-feature sizes of B, the scales and the zero points: everything but N).
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, std::string>;
  auto attr = [](const Node& n, const char* name, int64_t fallback) {
    const Attribute* a = n.find_attribute(name);
    return a && a->kind == Attribute::Kind::kInt ? a->i : fallback;
  };
  auto per_feature = [](const Tensor& t, int64_t n) {
    Shape s = t.shape();
    if (t.rank() == 0) return cat(dtype_name(t.dtype()), 0);  // a scalar: no per-feature axis
    s[0] = t.rank() >= 2 ? 1 : s[0] / n;
    return cat(dtype_name(t.dtype()), t.rank(), s.str());
  };
  auto key_of = [&](size_t k) -> std::optional<Key> {
    const Node& n = g.nodes[k];
    if (n.op_type != "MatMulNBits" || n.domain != "com.microsoft" || n.outputs.size() != 1 || n.outputs[0] < 0 ||
        n.inputs.size() < 3 || n.inputs.size() > 4 || n.inputs[0] < 0)
      return std::nullopt;
    const Tensor* b = constant_value(g, n.inputs[1]);
    const Tensor* sc = constant_value(g, n.inputs[2]);
    const bool zp = n.inputs.size() == 4 && n.inputs[3] >= 0;
    const Tensor* z = zp ? constant_value(g, n.inputs[3]) : nullptr;
    const int64_t N = attr(n, "N", -1);
    if (!b || !sc || (zp && !z) || N <= 0 || b->rank() < 1 || b->shape()[0] != N || sc->rank() < 1 ||
        sc->shape()[0] % N != 0 || (sc->rank() >= 2 && sc->shape()[0] != N) ||
        (z && (z->rank() < 1 || z->shape()[0] % N != 0 || (z->rank() >= 2 && z->shape()[0] != N))))
      return std::nullopt;
    std::string layout = per_feature(*b, N) + "/" + per_feature(*sc, N);
    if (z) layout += "/" + per_feature(*z, N);
    return Key{n.inputs[0], attr(n, "K", -1), attr(n, "bits", 4), attr(n, "block_size", -1),
               attr(n, "accuracy_level", 0), layout};
  };
  std::vector<bool> removed(g.nodes.size(), false);
  std::map<size_t, Node> emit;  // a node to put at an index (in place of what was there)
  std::vector<int> replaced;
  // One LinearNBits over the members' weights, scales and zero points stacked by output feature
  // (scales and zero points are [N, ...] or flat [N * ...]: either way in feature order).
  auto stacked_node = [&](const std::vector<NBitsMember>& members, std::vector<int> outs, Attribute shape_attr) {
    const Node& first = g.nodes[members[0].node];
    std::vector<const Tensor*> bs, ss, zs;
    int64_t total = 0;
    for (const NBitsMember& m : members) {
      const Node& n = g.nodes[m.node];
      bs.push_back(constant_value(g, n.inputs[1]));
      ss.push_back(constant_value(g, n.inputs[2]));
      if (n.inputs.size() == 4) zs.push_back(constant_value(g, n.inputs[3]));
      total += m.n;
      for (int in : {1, 2, 3})
        if (in < static_cast<int>(n.inputs.size())) replaced.push_back(n.inputs[in]);
      removed[m.node] = true;
    }
    // (The node's index keeps the names apart where nodes have none.)
    const std::string base = cat(first.name.empty() ? "nbits" : first.name, "#", members[0].node);
    Tensor b = concat_rows(bs);
    r.weight_bytes += b.bytes();
    std::vector<int> ins{first.inputs[0], add_initializer(g, base + "/stacked_B", std::move(b)),
                         add_initializer(g, base + "/stacked_scales", concat_rows(ss))};
    if (!zs.empty()) ins.push_back(add_initializer(g, base + "/stacked_zero_points", concat_rows(zs)));
    std::vector<Attribute> attrs;
    for (const Attribute& a : first.attributes)
      if (a.name != "N") attrs.push_back(a);
    attrs.push_back(make_int_attr("N", total));
    attrs.push_back(std::move(shape_attr));
    r.grouped += static_cast<int>(members.size());
    ++r.groups;
    return make_node(base + "/stacked", "onyx", "LinearNBits", 1, ins, std::move(outs), attrs);
  };
  // SiluMul(MatMulNBits(x, Bg), MatMulNBits(x, Bu)), each product read there alone, of one
  // layout and N -> LinearNBits(x, [Bg; Bu]; gated = 1), at the SiluMul's place; and the GELU-gated
  // form, Mul(Gelu(MatMulNBits(x, Bg)), MatMulNBits(x, Bu)) -> the same with its activation.
  std::unordered_map<int, int> readers = count_readers(g);
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const auto gm = gated_mul(g, k, removed, readers);
    if (!gm) continue;
    const Node& sm = g.nodes[k];
    const size_t gp = gm->gate, up = gm->up;
    const auto kg = key_of(gp), ku = key_of(up);
    if (!kg || !ku || *kg != *ku || readers[g.nodes[gp].outputs[0]] != 1 || readers[g.nodes[up].outputs[0]] != 1)
      continue;
    const int64_t n = attr(g.nodes[gp], "N", -1);
    if (attr(g.nodes[up], "N", -1) != n) continue;
    emit[k] = stacked_node({{gp, n}, {up, n}}, {sm.outputs[0]},
                           make_int_attr("gated", 1));
    if (gm->act != GateActivation::kSilu)
      emit[k].attributes.push_back(make_string_attr("activation", gate_activation_name(gm->act)));
    if (gm->act_node >= 0) removed[static_cast<size_t>(gm->act_node)] = true;
    removed[k] = true;
  }
  // The other products reading one A with one layout -> LinearNBits(A, [B_0; ...]; splits), at
  // the first member's place.
  std::map<Key, std::vector<NBitsMember>> by_layout;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!removed[k])
      if (auto key = key_of(k)) by_layout[*key].push_back({k, attr(g.nodes[k], "N", -1)});
  for (auto& [key, members] : by_layout) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end(), [](const NBitsMember& a, const NBitsMember& b) { return a.node < b.node; });
    std::vector<int64_t> splits;
    std::vector<int> outs;
    for (const NBitsMember& m : members) {
      splits.push_back(m.n);
      outs.push_back(g.nodes[m.node].outputs[0]);
    }
    const size_t at = members[0].node;
    emit[at] = stacked_node(members, std::move(outs), make_ints_attr("splits", std::move(splits)));
  }
  if (emit.empty()) return r;
  std::vector<Node> nodes;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    if (auto it = emit.find(k); it != emit.end()) nodes.push_back(std::move(it->second));
    else if (!removed[k]) nodes.push_back(std::move(g.nodes[k]));
  }
  g.nodes = std::move(nodes);
  set_producers(g);
  drop_unread_initializers(g, replaced);
  return r;
}

LinearReport biases_into_linear(Graph& g) {
  LinearReport r;
  auto readers = count_readers(g);
  const std::unordered_set<int> pinned = pinned_values(g);
  std::unordered_map<int, size_t> reader_of;  // value -> the node reading it (where it has one reader)
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int in : g.nodes[k].inputs)
      if (in >= 0 && readers[in] == 1) reader_of[in] = k;
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<int> replaced;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& lin = g.nodes[k];
    if (lin.domain != "onyx") continue;
    const bool norm = lin.op_type == "RmsNormLinear";
    const size_t w_at = norm ? 3 : 1, first_out = norm ? 1 : 0;
    if (!(lin.op_type == "Linear" && lin.inputs.size() == 2) && !(norm && lin.inputs.size() == 4)) continue;
    if (norm && lin.find_attribute("gated") && lin.find_attribute("gated")->i != 0) continue;
    const Tensor* w = constant_value(g, lin.inputs[w_at]);
    if (!w || w->rank() != 2) continue;
    // Each output's Add of a constant [N_i] of the weight's dtype, where the output has no other reader.
    std::vector<std::pair<size_t, const Tensor*>> adds(lin.outputs.size(), {0, nullptr});
    int found = 0;
    for (size_t o = first_out; o < lin.outputs.size(); ++o) {
      const int y = lin.outputs[o];
      if (y < 0 || pinned.count(y) || !reader_of.count(y)) continue;
      const size_t a = reader_of.at(y);
      const Node& add = g.nodes[a];
      if (removed[a] || add.op_type != "Add" || !(add.domain.empty() || add.domain == "ai.onnx") ||
          add.inputs.size() != 2 || add.outputs.size() != 1 || add.outputs[0] < 0)
        continue;
      const int other = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
      const Tensor* c = other >= 0 && other != y && !g.values[other].is_input ? constant_value(g, other) : nullptr;
      if (!c || c->rank() != 1 || c->dtype() != w->dtype() || !c->on_host()) continue;
      adds[o] = {a, c};
      ++found;
    }
    if (!found) continue;
    // The bias: each output's constant, zeros where it has none.
    Tensor bias(w->dtype(), Shape{w->shape()[0]});
    std::memset(bias.raw(), 0, bias.bytes());
    const std::vector<int64_t> widths = [&] {
      std::vector<int64_t> s;
      if (const Attribute* a = lin.find_attribute("splits")) s = a->ints;
      if (s.empty()) s = {w->shape()[0]};
      return s;
    }();
    if (widths.size() != lin.outputs.size() - first_out) continue;
    bool fits = true;
    int64_t start = 0;
    for (size_t o = first_out; o < lin.outputs.size(); ++o) {
      const int64_t n = widths[o - first_out];
      if (const Tensor* c = adds[o].second) {
        if (c->shape()[0] != n) fits = false;
        else
          std::memcpy(static_cast<char*>(bias.raw()) + static_cast<size_t>(start) * dtype_size(bias.dtype()), c->raw(),
                      c->bytes());
      }
      start += n;
    }
    if (!fits || start != w->shape()[0]) continue;
    for (size_t o = first_out; o < lin.outputs.size(); ++o) {
      if (!adds[o].second) continue;
      const size_t a = adds[o].first;
      lin.outputs[o] = g.nodes[a].outputs[0];  // the product makes the sum itself
      removed[a] = true;
      for (int in : g.nodes[a].inputs)
        if (in >= 0 && in != lin.outputs[o]) replaced.push_back(in);
    }
    lin.inputs.push_back(add_initializer(g, lin.name + "/bias", std::move(bias)));
    ++r.biased;
    r.weight_bytes += static_cast<size_t>(w->shape()[0]) * dtype_size(w->dtype());
  }
  if (!r.biased) return r;
  std::vector<std::pair<size_t, Node>> none;
  replace_nodes(g, removed, none);
  drop_unread_initializers(g, replaced);
  return r;
}

}  // namespace onyx
