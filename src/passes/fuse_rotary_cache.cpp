#include "passes/fuse_rotary_cache.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include "passes/pattern_match.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

using rewrite::Matcher;

bool onyx_op(const Node& n, const char* op) { return n.domain == "onyx" && n.op_type == op; }

// A cache write of the fusable form: Concat(past, new) along the positions axis of a 4-D
// tensor, or CacheUpdate(past, new, index) along it.
struct CacheWrite {
  int past = -1, fresh = -1, index = -1;
};

std::optional<CacheWrite> cache_write(const Node& n) {
  if (n.outputs.size() != 1) return std::nullopt;
  const int64_t axis = Matcher::attr_int(n, "axis", n.op_type == "CacheUpdate" ? 2 : 0);
  if (axis != 2 && axis != -2) return std::nullopt;
  if ((n.domain.empty() || n.domain == "ai.onnx") && n.op_type == "Concat" && n.inputs.size() == 2)
    return CacheWrite{n.inputs[0], n.inputs[1], -1};
  if (n.domain == "onyx.genai" && n.op_type == "CacheUpdate" && n.inputs.size() == 3 && n.inputs[2] >= 0)
    return CacheWrite{n.inputs[0], n.inputs[1], n.inputs[2]};
  return std::nullopt;
}

// The dtype of value `id` where the graph states it (declared, or a constant's).
DType stated_dtype(const Graph& g, int id) {
  if (id < 0) return DType::kUndefined;
  if (g.values[id].declared.dtype != DType::kUndefined) return g.values[id].declared.dtype;
  if (const Tensor* t = constant_value(g, id)) return t->dtype();
  return DType::kUndefined;
}

bool same_split(const Node& a, const Node& b) {
  const Attribute* sa = a.find_attribute("split");
  const Attribute* sb = b.find_attribute("split");
  if (!sa || !sb) return !sa && !sb;
  return sa->kind == Attribute::Kind::kInt && sb->kind == Attribute::Kind::kInt && sa->i == sb->i;
}

// Where a fused node may take the place of some of a graph's nodes: the readers of every value
// (node positions), made once per pass over the graph as it was.
class Placer {
 public:
  explicit Placer(const Graph& g) : g_(g) {
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      for (int id : g.nodes[k].inputs)
        if (id >= 0) read_at_[id].push_back(static_cast<int>(k));
      for (int id : g.nodes[k].implicit_inputs) read_at_[id].push_back(static_cast<int>(k));
    }
  }
  int producer(int id) const { return id >= 0 ? g_.values[id].producer : -1; }
  // The first of `mine` (the nodes the fused one replaces) that comes after every input's
  // producer, if it comes before every other reader of the outputs; else -1.
  int place(std::vector<int> mine, const std::vector<int>& inputs, const std::vector<int>& outputs) const {
    int after = -1;
    for (int id : inputs) after = std::max(after, producer(id));
    int before = std::numeric_limits<int>::max();
    for (int id : outputs) {
      auto it = read_at_.find(id);
      if (it == read_at_.end()) continue;
      for (int reader : it->second)
        if (std::find(mine.begin(), mine.end(), reader) == mine.end()) before = std::min(before, reader);
    }
    std::sort(mine.begin(), mine.end());
    for (int p : mine)
      if (p > after) return p < before ? p : -1;
    return -1;
  }

 private:
  const Graph& g_;
  std::unordered_map<int, std::vector<int>> read_at_;
};

}  // namespace

RotaryCacheReport fuse_rotary_cache(Graph& g) {
  RotaryCacheReport r;
  Matcher m(g);
  const Placer placer(g);
  auto producer = [&](int id) { return placer.producer(id); };
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;
  for (size_t a = 0; a < g.nodes.size(); ++a) {
    const Node& attn = g.nodes[a];
    if (!m.plain(attn, "Attention") || attn.inputs.size() < 3) continue;
    const int q_rot = attn.inputs[0], present_k = attn.inputs[1], present_v = attn.inputs[2];
    const int qp = producer(q_rot), ckp = producer(present_k), cvp = producer(present_v);
    if (qp < 0 || ckp < 0 || cvp < 0 || ckp == cvp) continue;
    const Node& qn = g.nodes[qp];
    const auto ck = cache_write(g.nodes[ckp]), cv = cache_write(g.nodes[cvp]);
    if (!onyx_op(qn, "RotaryHalf") || qn.inputs.size() != 3 || qn.outputs.size() != 1 || !ck || !cv) continue;
    if (ck->index != cv->index || g.nodes[ckp].op_type != g.nodes[cvp].op_type) continue;
    const int k_rot = ck->fresh;
    const int kp = producer(k_rot);
    if (kp < 0 || kp == qp) continue;
    const Node& kn = g.nodes[kp];
    if (!onyx_op(kn, "RotaryHalf") || kn.inputs.size() != 3 || kn.outputs.size() != 1) continue;
    const int q = qn.inputs[0], k = kn.inputs[0], v = cv->fresh, cos = qn.inputs[1], sin = qn.inputs[2];
    if (kn.inputs[1] != cos || kn.inputs[2] != sin || !same_split(qn, kn)) continue;
    if (ck->past == cv->past || ck->past < 0 || cv->past < 0 || v < 0) continue;
    bool rank4 = true;
    for (int id : {q, k, v, ck->past, cv->past}) rank4 = rank4 && m.rank(id) == 4;
    if (!rank4) continue;
    const DType t = stated_dtype(g, ck->past);
    if (t != stated_dtype(g, cv->past) ||
        (t != DType::kFloat32 && t != DType::kFloat16 && t != DType::kBFloat16))
      continue;
    if (removed[qp] || removed[kp] || removed[ckp] || removed[cvp]) continue;
    // The rotated keys: still made when anything but their cache reads them.
    const bool keep_keys = m.outputs.count(k_rot) || m.readers[k_rot] != 1;

    std::vector<int> inputs{q, k, v, cos, sin, ck->past, cv->past};
    if (ck->index >= 0) inputs.push_back(ck->index);
    std::vector<int> outputs{q_rot, present_k, present_v};
    if (keep_keys) outputs.push_back(k_rot);
    // The fused node goes at the first of the four places that comes after every input's
    // producer, and must come before every reader of its outputs (the four nodes aside).
    const std::vector<int> mine{qp, kp, ckp, cvp};
    const int at = placer.place(mine, inputs, outputs);
    if (at < 0) continue;

    std::vector<Attribute> attrs;
    if (const Attribute* s = qn.find_attribute("split")) attrs.push_back(*s);
    replace.emplace_back(static_cast<size_t>(at), make_node(kn.name + "/rotary_cache", "onyx", "RotaryCache", 1,
                                                            std::move(inputs), std::move(outputs), std::move(attrs)));
    for (int p : mine) removed[p] = true;
    ++r.fused;
    r.keys_kept += keep_keys ? 1 : 0;
  }
  replace_nodes(g, removed, replace);
  return r;
}

namespace {

// The Attention attributes the fused node carries (scale) or that have their default value.
bool attention_attrs_fusable(const Node& n) {
  for (const Attribute& a : n.attributes) {
    // (onyx_zero_masked_rows: the fused kernels give a row whose every key is masked zeros.)
    if (a.name == "scale" || (a.name == "onyx_zero_masked_rows" && a.kind == Attribute::Kind::kInt)) continue;
    const bool zero_int = a.kind == Attribute::Kind::kInt && a.i == 0;
    const bool zero_float = a.kind == Attribute::Kind::kFloat && a.f == 0.f;
    if ((a.name == "is_causal" || a.name == "qk_matmul_output_mode") && zero_int) continue;
    if (a.name == "softcap" && zero_float) continue;
    return false;
  }
  return true;
}

}  // namespace

int fuse_rotary_attention(Graph& g) {
  // An indexed RotaryCache writes its caches in place: its presents have its pasts' shapes, and
  // its rotated q has q's. A Shape of one of them (transformers slices the mask at the keys'
  // length and reads the query's) reads the past or q instead, so that neither the mask nor the
  // rotated q's readers wait on the node it is fused into.
  for (const Node& rc : g.nodes) {
    if (!onyx_op(rc, "RotaryCache") || rc.inputs.size() != 8 || rc.inputs[7] < 0 || rc.outputs.size() < 3) continue;
    for (Node& n : g.nodes)
      if ((n.op_type == "Shape" && (n.domain.empty() || n.domain == "ai.onnx")) && n.inputs.size() == 1)
        for (int o = 0; o <= 2; ++o)
          if (n.inputs[0] >= 0 && n.inputs[0] == rc.outputs[static_cast<size_t>(o)])
            n.inputs[0] = o == 0 ? rc.inputs[0] : rc.inputs[4 + o];
  }
  Matcher m(g);
  const Placer placer(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;
  int fused = 0;
  for (size_t a = 0; a < g.nodes.size(); ++a) {
    const Node& attn = g.nodes[a];
    if (!m.plain(attn, "Attention") || attn.inputs.size() < 3 || !attention_attrs_fusable(attn)) continue;
    bool extra = false;
    for (size_t i = 4; i < attn.inputs.size(); ++i) extra = extra || attn.inputs[i] >= 0;
    for (size_t o = 1; o < attn.outputs.size(); ++o) extra = extra || attn.outputs[o] >= 0;
    if (extra || attn.outputs.empty() || attn.outputs[0] < 0) continue;
    const int rp = placer.producer(attn.inputs[0]);
    if (rp < 0 || removed[rp]) continue;
    const Node& rc = g.nodes[rp];
    if (!onyx_op(rc, "RotaryCache") || rc.inputs.size() != 8 || rc.inputs[7] < 0) continue;
    if (rc.outputs.size() > 3 && rc.outputs[3] >= 0) continue;
    if (rc.outputs[0] != attn.inputs[0] || rc.outputs[1] != attn.inputs[1] || rc.outputs[2] != attn.inputs[2]) continue;
    const int q_rot = rc.outputs[0];
    if (m.outputs.count(q_rot) || m.readers[q_rot] != 1) continue;
    const int mask = attn.inputs.size() > 3 ? attn.inputs[3] : -1;

    std::vector<int> inputs(rc.inputs.begin(), rc.inputs.begin() + 8);
    if (mask >= 0) inputs.push_back(mask);
    const std::vector<int> outputs{rc.outputs[0], rc.outputs[1], rc.outputs[2], attn.outputs[0]};
    // At the RotaryCache's place or the Attention's.
    const int at = placer.place({rp, static_cast<int>(a)}, inputs, outputs);
    if (at < 0) continue;

    std::vector<Attribute> attrs;
    if (const Attribute* s = rc.find_attribute("split")) attrs.push_back(*s);
    if (const Attribute* s = attn.find_attribute("scale")) attrs.push_back(*s);
    if (const Attribute* z = attn.find_attribute("onyx_zero_masked_rows")) attrs.push_back(*z);
    replace.emplace_back(static_cast<size_t>(at), make_node(rc.name + "/attention", "onyx", "RotaryCacheAttention", 1,
                                                            std::move(inputs), outputs, std::move(attrs)));
    removed[rp] = removed[a] = true;
    ++fused;
  }
  replace_nodes(g, removed, replace);
  return fused;
}

}  // namespace onyx
