#include "passes/fuse_patterns.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "passes/pattern_match.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

using rewrite::Matcher;
using rewrite::other_input;

constexpr int64_t kToTheEnd = int64_t{1} << 31;  // a Slice end at least this is "to the end" of any real axis

bool near(std::optional<double> v, double want, double rel = 1e-5) {
  return v && std::fabs(*v - want) <= rel * std::fabs(want);
}

// The GELU chains (fuse_cpu.h) ending at the Mul `k`: the fused node, or nothing.
struct GeluMatch {
  int x = -1;
  bool tanh_form = false;
  std::vector<int> chain;  // the chain's nodes other than `k`
};

std::optional<GeluMatch> match_gelu(Matcher& m, const Node& mul) {
  Graph& g = m.g;
  auto producer = [&](int id) { return g.values[id].producer; };
  if (!m.plain(mul, "Mul") || mul.inputs.size() != 2) return std::nullopt;
  // The product's three factors: one of the Mul's inputs is itself a private Mul.
  for (int side = 0; side < 2; ++side) {
    Node* inner = m.sole(mul.inputs[side], "Mul");
    if (!inner || inner->inputs.size() != 2) continue;
    const int leaves[3] = {mul.inputs[1 - side], inner->inputs[0], inner->inputs[1]};
    for (int h = 0; h < 3; ++h) {  // the factor 0.5
      if (!near(m.scalar(leaves[h]), 0.5)) continue;
      for (int e = 0; e < 3; ++e) {  // the factor (1 + erf(..)) or (1 + tanh(..))
        if (e == h) continue;
        const int x = leaves[3 - h - e];
        Node* add = m.sole(leaves[e], "Add");
        if (!add || add->inputs.size() != 2) continue;
        int t = -1;
        for (int j = 0; j < 2; ++j)
          if (near(m.scalar(add->inputs[j]), 1.0)) t = add->inputs[1 - j];
        if (t < 0) continue;
        GeluMatch r;
        r.x = x;
        r.chain = {producer(mul.inputs[side]), producer(leaves[e]), producer(t)};
        if (Node* erf = m.sole(t, "Erf"); erf && erf->inputs.size() == 1) {
          const int s = erf->inputs[0];
          Node* div = m.sole(s, "Div");
          Node* scale = div ? nullptr : m.sole(s, "Mul");
          const bool by_div = div && div->inputs.size() == 2 && div->inputs[0] == x &&
                              near(m.scalar(div->inputs[1]), std::sqrt(2.0));
          const bool by_mul = scale && other_input(*scale, x) >= 0 &&
                              near(m.scalar(other_input(*scale, x)), 1 / std::sqrt(2.0));
          if (!by_div && !by_mul) continue;
          r.chain.push_back(producer(s));
          return r;
        }
        Node* th = m.sole(t, "Tanh");
        if (!th || th->inputs.size() != 1) continue;
        // Mul(sqrt(2/pi), Add(x, Mul(0.044715, Pow(x, 3))))
        Node* sc = m.sole(th->inputs[0], "Mul");
        if (!sc || sc->inputs.size() != 2) continue;
        int inner_sum = -1;
        for (int j = 0; j < 2; ++j)
          if (near(m.scalar(sc->inputs[j]), std::sqrt(2 / M_PI), 1e-4)) inner_sum = sc->inputs[1 - j];
        Node* sum = inner_sum >= 0 ? m.sole(inner_sum, "Add") : nullptr;
        const int cubic = sum ? other_input(*sum, x) : -1;
        Node* cm = cubic >= 0 ? m.sole(cubic, "Mul") : nullptr;
        if (!cm || cm->inputs.size() != 2) continue;
        int cube = -1;
        for (int j = 0; j < 2; ++j)
          if (near(m.scalar(cm->inputs[j]), 0.044715, 1e-4)) cube = cm->inputs[1 - j];
        if (cube < 0) continue;
        // x^3: Pow(x, 3), or x times a private Mul(x, x) (TorchScript's gelu(approximate="tanh"))
        int square = -1;
        if (Node* pw = m.sole(cube, "Pow")) {
          if (pw->inputs.size() != 2 || pw->inputs[0] != x || !near(m.scalar(pw->inputs[1]), 3.0)) continue;
        } else if (Node* c3 = m.sole(cube, "Mul"); c3 && c3->inputs.size() == 2) {
          const int sq = other_input(*c3, x);
          Node* c2 = sq >= 0 ? m.sole(sq, "Mul") : nullptr;
          if (!c2 || c2->inputs.size() != 2 || c2->inputs[0] != x || c2->inputs[1] != x) continue;
          square = sq;
        } else {
          continue;
        }
        r.tanh_form = true;
        r.chain.insert(r.chain.end(), {producer(th->inputs[0]), producer(inner_sum), producer(cubic), producer(cube)});
        if (square >= 0) r.chain.push_back(producer(square));
        return r;
      }
    }
  }
  return std::nullopt;
}

}  // namespace

// Drops every node whose one output equals one of its inputs (`same(node)` gives that input, or
// -1): its readers read the input instead. Not where the output is a graph output or a subgraph
// reads it. Returns how many went.
template <class Same>
static int drop_pass_throughs(Graph& g, Same same) {
  const std::unordered_set<int> keep = pinned_values(g);
  std::vector<bool> removed(g.nodes.size(), false);
  int dropped = 0;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& n = g.nodes[k];
    if (!(n.domain.empty() || n.domain == "ai.onnx") || n.outputs.size() != 1 || n.outputs[0] < 0 ||
        keep.count(n.outputs[0]))
      continue;
    const int in = same(n);
    if (in < 0) continue;
    redirect_reads(g, n.outputs[0], in);
    removed[k] = true;
    ++dropped;
  }
  std::vector<std::pair<size_t, Node>> none;
  if (dropped) replace_nodes(g, removed, none);
  return dropped;
}

// A Concat of one input is that input (torch's trace of a cat onto an empty cache writes one).
static int drop_single_concats(Graph& g) {
  return drop_pass_throughs(g, [](const Node& c) { return c.op_type == "Concat" && c.inputs.size() == 1 ? c.inputs[0] : -1; });
}

// A Cast to the type its input already has (TorchScript exports cast a float32 model's hidden
// state to float32 around every norm), so that the norm, the residual add before it and the
// product after it match as they do without it.
static int drop_noop_casts(Graph& g) {
  return drop_pass_throughs(g, [&g](const Node& c) {
    if (c.op_type != "Cast" || c.inputs.size() != 1 || c.inputs[0] < 0) return -1;
    const Attribute* to = c.find_attribute("to");
    const DType in = traced_dtype(g, c.inputs[0]);
    return to && in != DType::kUndefined && dtype_from_onnx(static_cast<int>(to->i)) == in ? c.inputs[0] : -1;
  });
}

// Mul(x, 1) or Div(x, 1) with the one a constant of one element and of x's rank at most (rotary
// tables times transformers' attention_scaling of 1): the output is x, element for element (x * 1
// and x / 1 are x in IEEE arithmetic, NaN aside, whose payload nothing reads).
static int drop_multiplications_by_one(Graph& g) {
  const Matcher m(g);
  return drop_pass_throughs(g, [&m](const Node& n) {
    const bool div = n.op_type == "Div";
    if ((n.op_type != "Mul" && !div) || n.inputs.size() != 2) return -1;
    for (int side = div ? 1 : 0; side < 2; ++side) {
      const Tensor* one = m.constant(n.inputs[side]);
      const int x = n.inputs[1 - side];
      if (!one || one->numel() != 1 || m.scalar(n.inputs[side]) != 1.0 || x < 0) continue;
      if (one->rank() > 0 && m.rank(x) < static_cast<int>(one->rank())) continue;
      return x;
    }
    return -1;
  });
}

FuseReport fuse_patterns(Graph& g, const FuseOptions& options) {
  FuseReport r;
  r.multiplications_by_one = drop_multiplications_by_one(g);
  r.single_concats = drop_single_concats(g);
  r.noop_casts = drop_noop_casts(g);
  // GELU chains first: a gated product's activation (Gemma's MLP) or, on the CPU, a dense
  // layer's (fuse_cpu) may be one.
  {
    Matcher m(g);
    std::vector<bool> removed(g.nodes.size(), false);
    std::vector<std::pair<size_t, Node>> replace;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      if (removed[k]) continue;
      auto gm = match_gelu(m, g.nodes[k]);
      if (!gm) continue;
      bool free = true;
      for (int c : gm->chain) free = free && c >= 0 && !removed[c];
      if (!free) continue;
      for (int c : gm->chain) removed[c] = true;
      removed[k] = true;
      const Node& mul = g.nodes[k];
      replace.emplace_back(k, make_node(mul.name + "/fused_gelu", "com.microsoft", gm->tanh_form ? "FastGelu" : "Gelu",
                                         1, {gm->x}, {mul.outputs[0]}));
      ++r.gelus;
      r.nodes_removed += static_cast<int>(gm->chain.size());
    }
    if (r.gelus) replace_nodes(g, removed, replace);
  }
  Matcher m(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;  // position of the last node -> the fused node
  auto producer = [&](int id) { return g.values[id].producer; };
  // Claims the chain's nodes and node `k` for `fused`, unless another fusion claimed one first.
  auto commit = [&](size_t k, const std::vector<int>& chain, Node fused) {
    if (removed[k]) return false;
    for (int c : chain)
      if (removed[c]) return false;
    for (int c : chain) removed[c] = true;
    removed[k] = true;
    replace.emplace_back(k, std::move(fused));
    r.nodes_removed += static_cast<int>(chain.size());
    return true;
  };
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& out_mul = g.nodes[k];
    if (removed[k] || !m.plain(out_mul, "Mul") || out_mul.inputs.size() != 2) continue;
    // Mul(w, y) with y = Mul(x, inv) or Div(x, s); w a 1-D constant.
    for (int side = 0; side < 2; ++side) {
      const int w = out_mul.inputs[side], y = out_mul.inputs[1 - side];
      const Tensor* wt = m.constant(w);
      if (!wt || wt->rank() != 1) continue;
      int yp = y >= 0 ? g.values[y].producer : -1;
      if (yp < 0 || m.outputs.count(y) || m.readers[y] != 1) continue;
      std::vector<int> chain{yp};
      // Llama's exporters cast the normalized value to float before the weight (a no-op on
      // float32; the fused node computes in float and returns the scale's type).
      if (m.plain(g.nodes[yp], "Cast") && Matcher::attr_int(g.nodes[yp], "to", 0) == 1 && g.nodes[yp].inputs.size() == 1) {
        const int inner = g.nodes[yp].inputs[0];
        yp = inner >= 0 ? g.values[inner].producer : -1;
        if (yp < 0 || m.outputs.count(inner) || m.readers[inner] != 1) continue;
        chain.push_back(yp);
      }
      Node& yn = g.nodes[yp];
      int x = -1, s = -1;
      if (m.plain(yn, "Div") && yn.inputs.size() == 2) {
        x = yn.inputs[0];
        s = yn.inputs[1];
      } else if (m.plain(yn, "Mul") && yn.inputs.size() == 2) {
        for (int j = 0; j < 2 && s < 0; ++j) {
          const int inv = yn.inputs[j];
          Node* rec = m.sole(inv, "Reciprocal");
          Node* div = rec ? nullptr : m.sole(inv, "Div");
          if (rec && rec->inputs.size() == 1) {
            s = rec->inputs[0];
            chain.push_back(g.values[inv].producer);
          } else if (div && div->inputs.size() == 2 && m.scalar(div->inputs[0]) == 1.0) {
            s = div->inputs[1];
            chain.push_back(g.values[inv].producer);
          } else {
            continue;
          }
          x = yn.inputs[1 - j];
        }
      }
      if (x < 0 || s < 0) continue;
      Node* sqrt = m.sole(s, "Sqrt");
      if (!sqrt || sqrt->inputs.size() != 1) continue;
      chain.push_back(g.values[s].producer);
      const int var = sqrt->inputs[0];
      Node* add = m.sole(var, "Add");
      if (!add || add->inputs.size() != 2) continue;
      chain.push_back(g.values[var].producer);
      int mean = -1;
      std::optional<double> eps;
      for (int j = 0; j < 2 && !eps; ++j)
        if ((eps = m.scalar(add->inputs[j]))) mean = add->inputs[1 - j];
      if (!eps || *eps < 0) continue;
      Node* rm = m.sole(mean, "ReduceMean");
      if (!rm || rm->inputs.empty()) continue;
      chain.push_back(g.values[mean].producer);
      const Attribute* keep = rm->find_attribute("keepdims");
      if (keep && keep->i != 1) continue;
      std::vector<int64_t> axes;
      if (rm->inputs.size() > 1) {  // opset 18: axes as an input
        const Tensor* at = m.constant(rm->inputs[1]);
        if (!at) continue;
        axes = at->to_int64_vector();
      } else if (const Attribute* a = rm->find_attribute("axes")) {
        axes = a->ints;
      }
      const auto& xd = g.values[x].declared;
      const bool last =
          axes.size() == 1 && (axes[0] == -1 || (xd.rank_known && axes[0] == int64_t(xd.dims.size()) - 1));
      if (!last) continue;
      const int sq = rm->inputs[0];
      Node* pow = m.sole(sq, "Pow");
      Node* mul_sq = pow ? nullptr : m.sole(sq, "Mul");
      if (pow && pow->inputs.size() == 2 && pow->inputs[0] == x && m.scalar(pow->inputs[1]) == 2.0) {
        chain.push_back(g.values[sq].producer);
      } else if (mul_sq && mul_sq->inputs.size() == 2 && mul_sq->inputs[0] == x && mul_sq->inputs[1] == x) {
        chain.push_back(g.values[sq].producer);
      } else {
        continue;
      }
      // x itself may have other readers (the residual); every value in between must not.
      Node fused = make_node(out_mul.name + "/fused_rms_norm", "", "SimplifiedLayerNormalization", out_mul.opset,
                             {x, w}, {out_mul.outputs[0]},
                             {make_int_attr("axis", -1), make_float_attr("epsilon", static_cast<float>(*eps))});
      if (commit(k, chain, std::move(fused))) ++r.rms_norms;
      break;
    }
  }

  // Rotary embedding by halves: Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h:)), Slice(x, :h)), sin)).
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& add = g.nodes[k];
    if (removed[k] || !m.plain(add, "Add") || add.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      Node* mc = m.sole(add.inputs[side], "Mul");
      Node* ms = m.sole(add.inputs[1 - side], "Mul");
      if (!mc || !ms || mc->inputs.size() != 2 || ms->inputs.size() != 2) continue;
      Node* cat = nullptr;
      int sin = -1;
      for (int j = 0; j < 2 && !cat; ++j)
        if ((cat = m.sole(ms->inputs[j], "Concat"))) sin = ms->inputs[1 - j];
      if (!cat || cat->inputs.size() != 2) continue;
      Node* neg = m.sole(cat->inputs[0], "Neg");
      Node* lo = m.sole(cat->inputs[1], "Slice");
      Node* hi = neg && neg->inputs.size() == 1 ? m.sole(neg->inputs[0], "Slice") : nullptr;
      if (!lo || !hi || lo->inputs.empty() || hi->inputs.empty() || lo->inputs[0] != hi->inputs[0]) continue;
      const int x = lo->inputs[0];
      const int xr = m.rank(x);
      const int64_t axis = Matcher::attr_int(*cat, "axis", 0);
      if (!(axis == -1 || (xr > 0 && axis == xr - 1))) continue;
      const auto lr = m.last_axis_slice(*lo, xr), hr = m.last_axis_slice(*hi, xr);
      if (!lr || !hr || lr->first != 0 || lr->second <= 0 || hr->first != lr->second || hr->second < kToTheEnd)
        continue;
      const int cos = other_input(*mc, x);
      if (cos < 0) continue;
      Node fused = make_node(add.name + "/fused_rotary_half", "onyx", "RotaryHalf", 1, {x, cos, sin}, {add.outputs[0]},
                              {make_int_attr("split", lr->second)});
      const std::vector<int> chain{producer(add.inputs[side]),
                                   producer(add.inputs[1 - side]),
                                   producer(ms->inputs[0] == sin ? ms->inputs[1] : ms->inputs[0]),
                                   producer(cat->inputs[0]),
                                   producer(cat->inputs[1]),
                                   producer(neg->inputs[0])};
      if (commit(k, chain, std::move(fused))) ++r.rotary_halves;
      break;
    }
  }

  // SiLU-gated product: Mul(Mul(g, Sigmoid(g)), u), either operand order at each Mul.
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& mul = g.nodes[k];
    if (removed[k] || !m.plain(mul, "Mul") || mul.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      Node* act = m.sole(mul.inputs[side], "Mul");
      if (!act || act->inputs.size() != 2) continue;
      int gate = -1, sig_out = -1;
      for (int j = 0; j < 2 && gate < 0; ++j) {
        Node* sig = m.sole(act->inputs[j], "Sigmoid");
        if (sig && sig->inputs.size() == 1 && sig->inputs[0] == act->inputs[1 - j]) {
          gate = act->inputs[1 - j];
          sig_out = act->inputs[j];
        }
      }
      if (gate < 0) continue;
      Node fused = make_node(mul.name + "/fused_silu_mul", "onyx", "SiluMul", 1, {gate, mul.inputs[1 - side]},
                              {mul.outputs[0]});
      if (commit(k, {producer(mul.inputs[side]), producer(sig_out)}, std::move(fused))) ++r.silu_muls;
      break;
    }
  }

  // Attention: MatMul(Softmax(Add(Mul(MatMul(q, Transpose(rep(k))), c), mask)), rep(v)).
  // rep(x): the KV heads repeated for their query heads (Unsqueeze/Expand/Reshape), or x.
  // Gemma 2 soft-caps the scaled scores before the mask: Mul(Tanh(Div(scores, cap)), cap), the
  // fused node's softcap.
  // `id` read by the nodes of `chain` and node `k` alone (the matched pattern's own reads).
  auto read_within = [&](int id, const std::vector<int>& chain, size_t k) {
    if (id < 0 || m.outputs.count(id)) return false;
    int inside = 0;
    for (int c : chain)
      for (int in : g.nodes[c].inputs) inside += in == id;
    for (int in : g.nodes[k].inputs) inside += in == id;
    return m.readers[id] == inside;
  };
  auto unrepeat = [&](int id, std::vector<int>& chain, size_t k) {
    const int rp = id >= 0 ? producer(id) : -1;
    Node* rs = rp >= 0 && read_within(id, chain, k) && m.plain(g.nodes[rp], "Reshape") ? &g.nodes[rp] : nullptr;
    Node* ex = rs && rs->inputs.size() == 2 ? m.sole(rs->inputs[0], "Expand") : nullptr;
    Node* un = ex && ex->inputs.size() == 2 ? m.sole(ex->inputs[0], "Unsqueeze") : nullptr;
    if (!un || un->inputs.empty()) return id;
    std::optional<std::vector<int64_t>> axes;
    if (un->inputs.size() > 1) axes = m.ints(un->inputs[1]);
    else if (const Attribute* a = un->find_attribute("axes")) axes = a->ints;
    const int e5 = m.elements(ex->inputs[1]), e4 = m.elements(rs->inputs[1]);
    if (!axes || *axes != std::vector<int64_t>{2} || (e5 >= 0 && e5 != 5) || (e4 >= 0 && e4 != 4)) return id;
    chain.push_back(producer(id));
    chain.push_back(producer(rs->inputs[0]));
    chain.push_back(producer(ex->inputs[0]));
    return un->inputs[0];
  };
  // Which of k's axes Slice(Shape(k), start, end) takes (constant bounds, along the shape's one
  // axis, step 1), in the forms that hold at any rank: 'L' the last ([-1:]), 'P' the one before
  // it ([-2:-1]), 'H' all before those ([:-2]); 0 for anything else.
  auto shape_slice = [&](int id, int k) -> char {
    const int p = id >= 0 ? producer(id) : -1;
    if (p < 0 || !m.plain(g.nodes[p], "Slice") || g.nodes[p].inputs.size() < 3 || g.nodes[p].opset < 10) return 0;
    const Node& sl = g.nodes[p];
    if (sl.inputs.size() > 3 && sl.inputs[3] >= 0 && m.ints(sl.inputs[3]) != std::vector<int64_t>{0}) return 0;
    if (sl.inputs.size() > 4 && sl.inputs[4] >= 0 && m.ints(sl.inputs[4]) != std::vector<int64_t>{1}) return 0;
    constexpr int64_t kBig = int64_t{1} << 31;  // past any rank: "to the end" or "from the start"
    const int sp = sl.inputs[0] >= 0 ? producer(sl.inputs[0]) : -1;
    if (sp < 0 || !m.plain(g.nodes[sp], "Shape") || g.nodes[sp].inputs.size() != 1 || g.nodes[sp].inputs[0] != k)
      return 0;
    for (const Attribute& a : g.nodes[sp].attributes)  // the whole shape (torch.export writes start=0)
      if (!(a.name == "start" && a.i == 0) && !(a.name == "end" && a.i >= kBig)) return 0;
    const auto st = m.ints(sl.inputs[1]), en = m.ints(sl.inputs[2]);
    if (!st || !en || st->size() != 1 || en->size() != 1) return 0;
    const int64_t a = (*st)[0], b = (*en)[0];
    if (a == -1 && b >= kBig) return 'L';
    if (a == -2 && b == -1) return 'P';
    if ((a == 0 || a <= -kBig) && b == -2) return 'H';
    return 0;
  };
  // Whether shape value `id` is Concat(pieces) along axis 0, the pieces as `want` spells them:
  // '-' the constant [-1], else a shape_slice form of k.
  auto shape_of_pieces = [&](int id, int k, const char* want) {
    Node* cat = m.sole(id, "Concat");
    if (!cat || Matcher::attr_int(*cat, "axis", 0) != 0 || cat->inputs.size() != std::char_traits<char>::length(want))
      return false;
    for (size_t i = 0; i < cat->inputs.size(); ++i) {
      if (want[i] == '-' ? m.ints(cat->inputs[i]) != std::vector<int64_t>{-1} : shape_slice(cat->inputs[i], k) != want[i])
        return false;
    }
    return true;
  };
  // k where `id` is Reshape(Transpose(Reshape(k, [-1, s[-2], s[-1]]), [0, 2, 1]), [s[:-2], s[-1], s[-2]]),
  // s = Shape(k); else -1.
  auto swapped_last_axes = [&](int id) {
    Node* outer = m.sole(id, "Reshape");
    Node* t3 = outer && outer->inputs.size() == 2 ? m.sole(outer->inputs[0], "Transpose") : nullptr;
    const Attribute* p3 = t3 ? t3->find_attribute("perm") : nullptr;
    Node* first = p3 && p3->ints == std::vector<int64_t>{0, 2, 1} ? m.sole(t3->inputs[0], "Reshape") : nullptr;
    if (!first || first->inputs.size() != 2) return -1;
    const int k = first->inputs[0];
    if (!shape_of_pieces(first->inputs[1], k, "-PL") || !shape_of_pieces(outer->inputs[1], k, "HLP")) return -1;
    return k;
  };
  // Shapes of a repeated K or V that read only its batch, length or size (transformers slices the
  // mask at the keys' length, k.shape[-2]) read them from the unrepeated value, where the
  // repetition keeps them: then the repetition's readers are the attention's alone.
  for (size_t k = 0; k < g.nodes.size() && options.attention; ++k) {
    Node& sh = g.nodes[k];
    if (removed[k] || !m.plain(sh, "Shape") || sh.inputs.size() != 1 || !sh.attributes.empty() ||
        sh.outputs.size() != 1 || sh.outputs[0] < 0 || m.outputs.count(sh.outputs[0]))
      continue;
    const int x = sh.inputs[0];
    const int xp = x >= 0 ? producer(x) : -1;
    if (xp < 0 || !m.plain(g.nodes[xp], "Reshape") || g.nodes[xp].inputs.size() != 2) continue;
    const int base = [&] {  // unrepeat's test, without claiming anything
      const Node& rs = g.nodes[xp];
      Node* ex = m.sole(rs.inputs[0], "Expand");
      Node* un = ex && ex->inputs.size() == 2 ? m.sole(ex->inputs[0], "Unsqueeze") : nullptr;
      if (!un || un->inputs.empty()) return -1;
      std::optional<std::vector<int64_t>> axes;
      if (un->inputs.size() > 1) axes = m.ints(un->inputs[1]);
      else if (const Attribute* a = un->find_attribute("axes")) axes = a->ints;
      const int e5 = m.elements(ex->inputs[1]);
      if (!axes || *axes != std::vector<int64_t>{2} || (e5 >= 0 && e5 != 5) || m.rank(un->inputs[0]) != 4) return -1;
      return un->inputs[0];
    }();
    if (base < 0) continue;
    // Entry i of the Reshape's shape is base's dimension i: Unsqueeze(Gather(Shape(base), i), [0]),
    // or a constant equal to base's declared dimension.
    auto same_dim = [&](int64_t i) {
      Node* cat = m.sole(g.nodes[xp].inputs[1], "Concat");
      if (!cat || cat->inputs.size() != 4 || Matcher::attr_int(*cat, "axis", 0) != 0) return false;
      for (int in : cat->inputs)
        if (m.elements(in) != 1) return false;
      const int piece = cat->inputs[static_cast<size_t>(i)];
      const TypeInfo& bt = g.values[base].declared;
      if (auto c = m.ints(piece))
        return bt.rank_known && bt.dims.size() == 4 && bt.dims[static_cast<size_t>(i)] > 0 &&
               (*c)[0] == bt.dims[static_cast<size_t>(i)];
      const int up = producer(piece);
      if (up < 0 || !m.plain(g.nodes[up], "Unsqueeze") || g.nodes[up].inputs.empty()) return false;
      const int gp = producer(g.nodes[up].inputs[0]);
      if (gp < 0 || !m.plain(g.nodes[gp], "Gather") || g.nodes[gp].inputs.size() != 2 ||
          Matcher::attr_int(g.nodes[gp], "axis", 0) != 0)
        return false;
      const auto gi = m.ints(g.nodes[gp].inputs[1]);
      const int sp = producer(g.nodes[gp].inputs[0]);
      return gi && gi->size() == 1 && (*gi)[0] >= -4 && (*gi)[0] < 4 && ((*gi)[0] + 4) % 4 == i && sp >= 0 &&
             m.plain(g.nodes[sp], "Shape") &&
             g.nodes[sp].attributes.empty() && g.nodes[sp].inputs.size() == 1 && g.nodes[sp].inputs[0] == base;
    };
    // Every reader a Gather of one constant index other than the heads' (axis 1), whose entry the
    // repetition keeps.
    bool heads_free = true;
    for (const Node& n : g.nodes) {
      for (int in : n.inputs) {
        if (in != sh.outputs[0]) continue;
        const auto idx = m.plain(n, "Gather") && n.inputs.size() == 2 && n.inputs[0] == in &&
                                 Matcher::attr_int(n, "axis", 0) == 0
                             ? m.ints(n.inputs[1])
                             : std::nullopt;
        const int64_t i = idx && idx->size() == 1 && (*idx)[0] >= -4 && (*idx)[0] < 4 ? ((*idx)[0] + 4) % 4 : 1;
        heads_free = heads_free && i != 1 && same_dim(i);
      }
    }
    if (!heads_free) continue;
    sh.inputs[0] = base;
    --m.readers[x];
    ++m.readers[base];
    ++r.shape_reads_moved;
  }
  for (size_t k = 0; k < g.nodes.size() && options.attention; ++k) {
    const Node& pv = g.nodes[k];
    if (removed[k] || !m.plain(pv, "MatMul") || pv.inputs.size() != 2) continue;
    std::vector<int> chain;
    int p = pv.inputs[0];
    // The node producing `id` when `op` produces it and `nreaders` node inputs read it.
    auto made_by = [&](int id, const char* op, int nreaders) -> Node* {
      if (id < 0 || m.outputs.count(id) || m.readers[id] != nreaders) return nullptr;
      const int pr = producer(id);
      return pr >= 0 && m.plain(g.nodes[pr], op) ? &g.nodes[pr] : nullptr;
    };
    // Casts between floating types around the softmax (computed in float32, cast back; the
    // exporters may write a cast to the type the value already has): the fused node computes
    // in float32 and returns the query's type. False where a Cast to another kind of type sits
    // there (the pattern is then not this one). The first value has `nreaders` readers.
    auto skip_casts = [&](int& id, int nreaders) {
      while (Node* c = made_by(id, "Cast", nreaders)) {
        const int64_t to = Matcher::attr_int(*c, "to", 0);
        if (c->inputs.size() != 1 || (to != 1 && to != 10 && to != 11 && to != 16)) return false;
        chain.push_back(producer(id));
        id = c->inputs[0];
        nreaders = 1;
      }
      return true;
    };
    if (!skip_casts(p, 1)) continue;
    // torch's decomposition of scaled_dot_product_attention sets the weights of a row whose
    // every key is masked (NaN after the softmax) to zeros: MatMul(Where(IsNaN(w), 0, w), v).
    // The fused node says so (onyx_zero_masked_rows); a plain one follows ONNX (NaN rows).
    bool zero_masked_rows = false;
    int sm_readers = 1;
    if (Node* wh = m.sole(p, "Where"); wh && wh->inputs.size() == 3) {
      const int w = wh->inputs[2], cond = wh->inputs[0];
      Node* isnan = m.sole(cond, "IsNaN");
      const auto zero = m.scalar(wh->inputs[1]);
      if (!isnan || isnan->inputs.size() != 1 || isnan->inputs[0] != w || !zero || *zero != 0.0) continue;
      chain.push_back(producer(p));
      chain.push_back(producer(cond));
      p = w;
      zero_masked_rows = true;
      sm_readers = 2;  // the IsNaN and the Where
      if (!skip_casts(p, 2)) continue;
      if (p != w) sm_readers = 1;
    }
    Node* sm = made_by(p, "Softmax", sm_readers);
    if (!sm || sm->inputs.size() != 1) continue;
    const int64_t sm_axis = Matcher::attr_int(*sm, "axis", sm->opset >= 13 ? -1 : 1);
    if (sm_axis != -1 && sm_axis != 3) continue;
    chain.push_back(producer(p));
    int s = sm->inputs[0];
    if (!skip_casts(s, 1)) continue;
    // The scores, with the mask added or not: try each Add operand as the scores.
    int mask = -1, q = -1, kr = -1;
    int key_transpose = -1;  // a Transpose to [b, h, d, s] kept and made the one to [b, h, s, d]
    double scale = 1.0, softcap = 0.0;
    std::vector<int> score_chain;
    auto scores = [&](int id) {
      score_chain.clear();
      scale = 1.0;
      softcap = 0.0;
      key_transpose = -1;
      // cap * tanh(x / cap) (or tanh(x * (1 / cap))), either operand order of the outer Mul.
      if (Node* outer = m.sole(id, "Mul"); outer && outer->inputs.size() == 2) {
        for (int j = 0; j < 2 && softcap == 0.0; ++j) {
          const auto cap = m.scalar(outer->inputs[j]);
          Node* th = cap && *cap > 0 ? m.sole(outer->inputs[1 - j], "Tanh") : nullptr;
          if (!th || th->inputs.size() != 1) continue;
          const int t_in = th->inputs[0];
          int x = -1;
          if (Node* dv = m.sole(t_in, "Div"); dv && dv->inputs.size() == 2) {
            if (auto c = m.scalar(dv->inputs[1]); c && std::abs(*c - *cap) <= 1e-6 * *cap) x = dv->inputs[0];
          } else if (Node* mu = m.sole(t_in, "Mul"); mu && mu->inputs.size() == 2) {
            for (int i = 0; i < 2 && x < 0; ++i)
              if (auto c = m.scalar(mu->inputs[i]); c && std::abs(*c * *cap - 1.0) <= 1e-6) x = mu->inputs[1 - i];
          }
          if (x < 0) continue;
          softcap = *cap;
          score_chain.push_back(producer(id));
          score_chain.push_back(producer(outer->inputs[1 - j]));
          score_chain.push_back(producer(t_in));
          id = x;
        }
      }
      int inner = id;
      if (Node* mul = m.sole(id, "Mul"); mul && mul->inputs.size() == 2) {
        for (int j = 0; j < 2; ++j)
          if (auto c = m.scalar(mul->inputs[j])) {
            scale = *c;
            inner = mul->inputs[1 - j];
            score_chain.push_back(producer(id));
            break;
          }
        if (inner == id) return false;
      } else if (Node* div = m.sole(id, "Div"); div && div->inputs.size() == 2) {
        auto c = m.scalar(div->inputs[1]);
        if (!c || *c == 0) return false;
        scale = 1.0 / *c;
        inner = div->inputs[0];
        score_chain.push_back(producer(id));
      }
      Node* qk = m.sole(inner, "MatMul");
      if (!qk || qk->inputs.size() != 2) return false;
      // torch's decomposition of scaled_dot_product_attention scales each operand by the root of
      // the scale instead: MatMul(Mul(q, s1), Mul(Transpose(k), s2)).
      int qa = qk->inputs[0], kb = qk->inputs[1];
      std::vector<int> operand_chain;
      auto unscale = [&](int& id) {
        Node* mul = m.sole(id, "Mul");
        if (!mul || mul->inputs.size() != 2) return true;
        for (int j = 0; j < 2; ++j)
          if (auto c = m.scalar(mul->inputs[j])) {
            scale *= *c;
            operand_chain.push_back(producer(id));
            id = mul->inputs[1 - j];
            return true;
          }
        return id != qk->inputs[1];  // a Mul by a non-constant before the transposed keys: not this pattern
      };
      if (!unscale(qa) || !unscale(kb)) return false;
      // torch.export's decomposition swaps K's last two axes through three dimensions:
      // Reshape(Transpose(Reshape(k, [-1, s[-2], s[-1]]), [0, 2, 1]), [s[:-2], s[-1], s[-2]]),
      // s = Shape(k): the same as Transpose(k, [0, 1, 3, 2]).
      if (const int k0 = swapped_last_axes(kb); k0 >= 0) {
        score_chain.push_back(producer(inner));
        score_chain.insert(score_chain.end(), operand_chain.begin(), operand_chain.end());
        const Node& outer = g.nodes[producer(kb)];
        const int t3 = producer(outer.inputs[0]);
        const Node& first = g.nodes[producer(g.nodes[t3].inputs[0])];
        score_chain.push_back(producer(kb));
        score_chain.push_back(t3);
        score_chain.push_back(producer(g.nodes[t3].inputs[0]));
        // The shape arithmetic goes too where nothing else reads it: the two Concats, their
        // Slices, the Shape of k (then k's readers are the pattern's, so its repetition can go).
        const int c1 = producer(first.inputs[1]), c2 = producer(outer.inputs[1]);
        std::vector<int> slices, shapes;
        for (int c : {c1, c2})
          for (int in : g.nodes[c].inputs)
            if (const int sp = producer(in); sp >= 0 && m.plain(g.nodes[sp], "Slice") &&
                                             std::find(slices.begin(), slices.end(), sp) == slices.end())
              slices.push_back(sp);
        for (int sl : slices)
          if (const int sh = producer(g.nodes[sl].inputs[0]); std::find(shapes.begin(), shapes.end(), sh) == shapes.end())
            shapes.push_back(sh);
        bool alone = shapes.size() == 1;
        for (int sl : slices) {
          const int out = g.nodes[sl].outputs[0];
          int reads = 0;
          for (int c : {c1, c2})
            for (int in : g.nodes[c].inputs) reads += in == out;
          alone = alone && !m.outputs.count(out) && m.readers[out] == reads;
        }
        alone = alone && !m.outputs.count(g.nodes[shapes[0]].outputs[0]) &&
                m.readers[g.nodes[shapes[0]].outputs[0]] == static_cast<int>(slices.size());
        if (alone) {
          score_chain.push_back(c1);
          score_chain.push_back(c2);
          score_chain.insert(score_chain.end(), slices.begin(), slices.end());
          score_chain.push_back(shapes[0]);
        }
        kr = k0;
        q = qa;
        return true;
      }
      Node* tr = m.sole(kb, "Transpose");
      const Attribute* perm = tr ? tr->find_attribute("perm") : nullptr;
      // K^T from K [batch, heads, positions, size], or straight from the heads split out of the
      // projection, [batch, positions, heads, size] (then that Transpose is kept, as the one to
      // [batch, heads, positions, size]).
      const bool from_bhsd = perm && perm->ints == std::vector<int64_t>{0, 1, 3, 2};
      const bool from_bshd = perm && perm->ints == std::vector<int64_t>{0, 2, 3, 1};
      if (!from_bhsd && !from_bshd) return false;
      score_chain.push_back(producer(inner));
      score_chain.insert(score_chain.end(), operand_chain.begin(), operand_chain.end());
      if (from_bhsd) {
        score_chain.push_back(producer(kb));
        kr = tr->inputs[0];
      } else {
        key_transpose = producer(kb);
        kr = kb;
      }
      q = qa;
      return true;
    };
    bool found = false;
    if (Node* add = m.sole(s, "Add"); add && add->inputs.size() == 2) {
      for (int j = 0; j < 2 && !found; ++j)
        if (scores(add->inputs[j])) {
          mask = add->inputs[1 - j];
          score_chain.push_back(producer(s));
          found = true;
        }
    } else {
      found = scores(s);
    }
    if (!found) continue;
    if (const Tensor* mt = mask >= 0 ? m.constant(mask) : nullptr) {
      // A constant mask: all zeros adds nothing (BERT-style graphs add a [1, 1, 1, 1] zero "no
      // mask"), so it goes; otherwise Attention takes a mask whose last two axes are the scores'
      // own, not broadcast along them.
      bool zeros = mt->on_host() && mt->dtype() == DType::kFloat32;
      for (int64_t i = 0; zeros && i < mt->numel(); ++i) zeros = mt->data<float>()[i] == 0.f;
      const int64_t r = static_cast<int64_t>(mt->rank());
      if (zeros) mask = -1;
      else if (r < 2 || mt->shape()[r - 1] == 1 || mt->shape()[r - 2] == 1) continue;
    }
    chain.insert(chain.end(), score_chain.begin(), score_chain.end());
    const int key = unrepeat(kr, chain, k);
    const int value = unrepeat(pv.inputs[1], chain, k);
    if ((key == kr) != (value == pv.inputs[1])) continue;  // one repeated, the other not: the heads disagree
    if (m.rank(q) != 4 || m.rank(key) != 4 || m.rank(value) != 4) continue;
    std::vector<int> inputs{q, key, value};
    if (mask >= 0) inputs.push_back(mask);
    if (key_transpose >= 0 && m.rank(g.nodes[key_transpose].inputs[0]) != 4) continue;
    std::vector<Attribute> attrs{make_float_attr("scale", static_cast<float>(scale))};
    if (softcap > 0) attrs.push_back(make_float_attr("softcap", static_cast<float>(softcap)));
    if (zero_masked_rows) attrs.push_back(make_int_attr("onyx_zero_masked_rows", 1));
    Node fused = make_node(pv.name + "/fused_attention", "", "Attention", 23, std::move(inputs), {pv.outputs[0]},
                           std::move(attrs));
    if (commit(k, chain, std::move(fused))) {
      ++r.attentions;
      if (key_transpose >= 0) {
        // The keys' Transpose now gives [batch, heads, positions, size]; its output's declared
        // type (if any) was the other layout's.
        Node& t = g.nodes[key_transpose];
        for (Attribute& a : t.attributes)
          if (a.name == "perm") a.ints = {0, 2, 1, 3};
        g.values[t.outputs[0]].declared.rank_known = false;
        g.values[t.outputs[0]].declared.dims.clear();
        g.values[t.outputs[0]].declared.dim_params.clear();
      }
    }
  }
  replace_nodes(g, removed, replace);

  // The residual add before an RMSNorm: SimplifiedLayerNormalization(Add(a, b), w) ->
  // SkipSimplifiedLayerNormalization(a, b, w) giving the norm and the sum (output 3), at the
  // Add's place (the sum's other readers come after it). On the graph with the fusions above.
  Matcher m2(g);
  std::vector<bool> removed2(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace2;
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& norm = g.nodes[k];
    if (norm.op_type != "SimplifiedLayerNormalization" || !norm.domain.empty() || norm.inputs.size() != 2 ||
        norm.outputs.size() != 1 || Matcher::attr_int(norm, "axis", -1) != -1 || removed2[k])
      continue;
    const int sum = norm.inputs[0];
    const int ap = sum >= 0 ? g.values[sum].producer : -1;
    if (ap < 0 || removed2[ap] || !m2.plain(g.nodes[ap], "Add") || g.nodes[ap].inputs.size() != 2) continue;
    const Node& add = g.nodes[ap];
    const int xr = m2.rank(add.inputs[0]), sr = m2.rank(add.inputs[1]);
    if (xr < 0 || xr != sr) continue;  // the skip broadcasts onto the input, never the other way
    const Attribute* eps = norm.find_attribute("epsilon");
    Node fused = make_node(norm.name + "/fused_skip", "com.microsoft", "SkipSimplifiedLayerNormalization", 1,
                            {add.inputs[0], add.inputs[1], norm.inputs[1]}, {norm.outputs[0], -1, -1, sum},
                            {make_float_attr("epsilon", eps ? eps->f : 1e-5f)});
    removed2[k] = removed2[ap] = true;
    replace2.emplace_back(static_cast<size_t>(ap), std::move(fused));
    ++r.skip_norms;
    ++r.nodes_removed;
  }
  replace_nodes(g, removed2, replace2);

  // A Shape reads its input's dimensions only: one of a norm's output, or of an op that keeps its
  // input's shape, reads that input instead. The norm's output is then left to the products
  // after it (norm_into_linear takes a norm that nothing else reads; the TorchScript exporter
  // reads the normalized hidden state's shape for its reshapes).
  static const std::unordered_set<std::string> keeps_shape{
      "Cast", "Identity", "Neg", "Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Reciprocal", "Exp", "Abs", "Softmax",
      "SimplifiedLayerNormalization", "LayerNormalization", "SkipSimplifiedLayerNormalization", "SkipLayerNormalization"};
  for (Node& n : g.nodes) {
    if (n.op_type != "Shape" || !(n.domain.empty() || n.domain == "ai.onnx") || n.inputs.size() != 1) continue;
    for (int hops = 0; hops < 64 && n.inputs[0] >= 0; ++hops) {
      const int p = g.values[n.inputs[0]].producer;
      if (p < 0) break;
      const Node& src = g.nodes[p];
      const bool own = src.domain.empty() || src.domain == "ai.onnx" || src.domain == "com.microsoft";
      if (!own || !keeps_shape.count(src.op_type) || src.outputs.empty() || src.outputs[0] != n.inputs[0] ||
          src.inputs.empty() || src.inputs[0] < 0)
        break;
      n.inputs[0] = src.inputs[0];
      ++r.shape_reads_moved;
    }
  }
  return r;
}

}  // namespace onyx
