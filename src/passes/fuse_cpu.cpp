#include "passes/fuse_cpu.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "cpu/gemm.h"
#include "cpu/winograd.h"
#include "passes/pattern_match.h"
#include "passes/rewrite_util.h"

namespace onyx {

using namespace rewrite;

namespace {

// The activation node `n` as DenseMatMul's attributes, or nothing when it is not one.
// Whether Conv node `n` has the geometry Winograd's F(2x2, 3x3) computes: strides and
// dilations 1 (absent or all 1) and no negative pad (auto_pad's are computed >= 0).
bool winograd_geometry(const Node& n) {
  for (const char* name : {"strides", "dilations"})
    if (const Attribute* a = n.find_attribute(name))
      for (int64_t v : a->ints)
        if (v != 1) return false;
  if (const Attribute* a = n.find_attribute("pads"))
    for (int64_t v : a->ints)
      if (v < 0) return false;
  return true;
}

// Whether a Conv reads one pixel of each channel and writes one: a 1 x 1 kernel (by its
// weights' shape) with no padding.
bool one_by_one_unpadded(const Node& n, const Tensor& w) {
  if (w.rank() < 3) return false;
  for (size_t d = 2; d < w.rank(); ++d)
    if (w.shape()[d] != 1) return false;
  if (const Attribute* a = n.find_attribute("pads"))
    for (int64_t v : a->ints)
      if (v != 0) return false;
  if (const Attribute* a = n.find_attribute("auto_pad"))
    if (a->s != "NOTSET" && a->s != "VALID" && !a->s.empty()) return false;
  return true;
}

// A window's output extents over an image of `in` (Conv or pooling: kernel from `kernel`, the
// node's strides, pads, dilations and ceil_mode), or nothing where auto_pad asks for SAME.
std::optional<std::vector<int64_t>> window_extents(const Node& n, const std::vector<int64_t>& in,
                                                   const std::vector<int64_t>& kernel) {
  const size_t r = in.size();
  if (kernel.size() != r) return std::nullopt;
  if (const Attribute* a = n.find_attribute("auto_pad"))
    if (!a->s.empty() && a->s != "NOTSET" && a->s != "VALID") return std::nullopt;
  auto ints = [&](const char* name, size_t count, int64_t fallback) {
    const Attribute* a = n.find_attribute(name);
    std::vector<int64_t> v = a ? a->ints : std::vector<int64_t>();
    if (v.size() != count) v.assign(count, fallback);
    return v;
  };
  const std::vector<int64_t> strides = ints("strides", r, 1), dil = ints("dilations", r, 1), pads = ints("pads", 2 * r, 0);
  const bool ceil_mode = Matcher::attr_int(n, "ceil_mode", 0) != 0;
  std::vector<int64_t> out(r);
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = in[d] + pads[d] + pads[d + r] - dil[d] * (kernel[d] - 1) - 1;
    if (span < 0 || strides[d] <= 0) return std::nullopt;
    out[d] = (ceil_mode ? (span + strides[d] - 1) / strides[d] : span / strides[d]) + 1;
  }
  return out;
}

std::optional<std::vector<Attribute>> activation_of(const Matcher& m, const Node& n) {
  auto act = [](const char* name, float a = 0, float b = 0) {
    return std::vector<Attribute>{make_string_attr("activation", name), make_float_attr("alpha", a), make_float_attr("beta", b)};
  };
  const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
  const bool ms = n.domain == "com.microsoft";
  if (n.outputs.size() != 1 || n.inputs.empty()) return std::nullopt;
  auto attr_f = [&](const char* name, float fallback) {
    const Attribute* a = n.find_attribute(name);
    return a && a->kind == Attribute::Kind::kFloat ? a->f : fallback;
  };
  if (onnx && n.op_type == "Relu") return act("relu");
  if (onnx && n.op_type == "Sigmoid") return act("sigmoid");
  if (onnx && n.op_type == "Tanh") return act("tanh");
  if (onnx && n.op_type == "HardSwish") return act("hard_swish");
  if (onnx && n.op_type == "LeakyRelu") return act("leaky_relu", attr_f("alpha", 0.01f));
  if (onnx && n.op_type == "HardSigmoid") return act("hard_sigmoid", attr_f("alpha", 0.2f), attr_f("beta", 0.5f));
  if (onnx && n.op_type == "Gelu") {
    const Attribute* a = n.find_attribute("approximate");
    const std::string approx = a ? a->s : "none";
    if (approx != "none" && approx != "tanh") return std::nullopt;
    return act(approx == "tanh" ? "gelu_tanh" : "gelu");
  }
  if (ms && n.inputs.size() == 1 && n.op_type == "Gelu") return act("gelu");
  if (ms && n.inputs.size() == 1 && n.op_type == "FastGelu") return act("gelu_tanh");
  if (onnx && n.op_type == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (n.opset < 11) {
      lo = attr_f("min", lo);
      hi = attr_f("max", hi);
    } else {
      for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) {
        if (n.inputs[i] < 0) continue;
        const Tensor* t = m.constant(n.inputs[i]);
        if (!t || t->numel() != 1 || t->dtype() != DType::kFloat32) return std::nullopt;
        (i == 1 ? lo : hi) = t->data<float>()[0];
      }
    }
    return act("clip", lo, hi);
  }
  return std::nullopt;
}

}  // namespace

CpuFuseReport fuse_cpu(Graph& g) {
  CpuFuseReport r;
  // Products by a transposed (and scaled) operand: attention scores as exporters write them.
  {
    Matcher m(g);
    std::vector<bool> removed(g.nodes.size(), false);
    std::vector<std::pair<size_t, Node>> replace;
    auto producer = [&](int id) { return g.values[id].producer; };
    // Whether value `id` is float32: declared so, an initializer, or made by an op whose output
    // type is its first input's (followed back through the graph) or float32 by definition.
    std::function<bool(int, int)> f32_from = [&](int id, int depth) -> bool {
      if (id < 0 || depth > 64) return false;
      const Value& v = g.values[id];
      if (v.declared.dtype != DType::kUndefined) return v.declared.dtype == DType::kFloat32;
      if (const Tensor* c = m.constant(id)) return c->dtype() == DType::kFloat32;
      const int p = v.producer;
      if (p < 0) return false;
      const Node& n = g.nodes[p];
      if (n.domain == "onyx" && (n.op_type == "DenseMatMul" || n.op_type == "FusedConv")) return true;
      if (m.plain(n, "Cast")) return Matcher::attr_int(n, "to", 0) == 1;  // FLOAT
      static const std::unordered_set<std::string> keeps{
          "Reshape", "Expand", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Slice", "Gather", "Identity",
          "Add", "Sub", "Mul", "Div", "Neg", "Softmax", "MatMul", "Split", "Tile", "Pad", "Sqrt", "Pow",
          "LayerNormalization", "Flatten"};
      if ((n.domain.empty() || n.domain == "ai.onnx") && keeps.count(n.op_type) && !n.inputs.empty())
        return f32_from(n.inputs[0], depth + 1);
      if (m.plain(n, "Where") && n.inputs.size() == 3) return f32_from(n.inputs[1], depth + 1);
      if ((n.domain == "onyx" || n.domain == "com.microsoft") && !n.inputs.empty() &&
          (n.op_type == "RotaryHalf" || n.op_type == "RotaryEmbedding" || n.op_type == "FusedMatMul"))
        return f32_from(n.inputs[0], depth + 1);
      return false;
    };
    auto is_f32 = [&](int id) { return f32_from(id, 0); };
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const Node& mm = g.nodes[k];
      if (!m.plain(mm, "MatMul") || mm.inputs.size() != 2 || mm.outputs.size() != 1) continue;
      int bt = mm.inputs[1];
      double alpha = 1.0;
      bool f32 = is_f32(mm.inputs[0]) || is_f32(mm.inputs[1]) || is_f32(mm.outputs[0]);
      std::vector<int> chain;
      if (Node* mul = m.sole(bt, "Mul"); mul && mul->inputs.size() == 2) {
        for (int j = 0; j < 2; ++j) {
          const Tensor* c = m.constant(mul->inputs[j]);
          if (!c || c->numel() != 1 || c->dtype() != DType::kFloat32 || !c->on_host()) continue;
          if (!m.sole(mul->inputs[1 - j], "Transpose")) continue;
          alpha = c->data<float>()[0];
          chain.push_back(producer(bt));
          bt = mul->inputs[1 - j];
          f32 = true;
          break;
        }
      }
      Node* tr = m.sole(bt, "Transpose");
      if (!tr || tr->inputs.size() != 1 || !f32 || !std::isfinite(alpha)) continue;
      // The transposition must swap the last two axes and keep the others.
      const int rank = m.rank(tr->inputs[0]);
      const Attribute* perm = tr->find_attribute("perm");
      if (rank < 2) continue;
      bool swap_last = true;
      if (perm) {
        swap_last = perm->kind == Attribute::Kind::kInts && static_cast<int>(perm->ints.size()) == rank;
        for (int a = 0; swap_last && a < rank; ++a)
          swap_last = perm->ints[a] == (a == rank - 2 ? rank - 1 : a == rank - 1 ? rank - 2 : a);
      } else {
        swap_last = rank == 2;  // no perm: all axes reversed
      }
      if (!swap_last) continue;
      chain.push_back(producer(bt));
      bool free = !removed[k];
      for (int c : chain) free = free && c >= 0 && !removed[c];
      if (!free) continue;
      for (int c : chain) removed[c] = true;
      removed[k] = true;
      replace.emplace_back(k, make_node(mm.name + "/transposed_b", "com.microsoft", "FusedMatMul", 1,
                                         {mm.inputs[0], tr->inputs[0]}, {mm.outputs[0]},
                                         {make_int_attr("transB", 1), make_float_attr("alpha", static_cast<float>(alpha))}));
      ++r.transposed_products;
      r.nodes_removed += static_cast<int>(chain.size());
    }
    replace_nodes(g, removed, replace);
  }

  Matcher m(g);
  std::unordered_map<int, int> reader;  // value id -> a node reading it (the only one when readers == 1)
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int id : g.nodes[k].inputs)
      if (id >= 0) reader[id] = static_cast<int>(k);
  // The node that alone reads `id`, when the value is private to it.
  auto sole_reader = [&](int id) -> Node* {
    if (id < 0 || m.outputs.count(id) || m.readers[id] != 1) return nullptr;
    return &g.nodes[reader.at(id)];
  };
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, Node>> replace;
  std::unordered_set<int> unpacked;        // weights that a dense node no longer reads
  std::unordered_map<int, int> reads_left = m.readers;  // node inputs still reading each value
  // The weight packed (and scaled by `alpha`, Gemm's) once per (weight, transposition, alpha).
  std::map<std::tuple<int, bool, float>, int> packed_ids;
  auto packed = [&](int w, bool trans, int64_t k, int64_t n, float alpha) {
    const auto key = std::make_tuple(w, trans, alpha);
    if (auto it = packed_ids.find(key); it != packed_ids.end()) return it->second;
    const Tensor& wt = *m.constant(w);
    Tensor p(DType::kFloat32, Shape({cpu::packed_size(k, n)}));
    cpu::pack_b(wt.data<float>(), trans ? k : n, trans, k, n, p.data<float>());
    if (alpha != 1.f)
      for (float& x : std::span<float>(p.data<float>(), static_cast<size_t>(p.numel()))) x *= alpha;
    const int id = add_initializer(g, g.values[w].name + (trans ? "/packed_t" : "/packed"), std::move(p));
    packed_ids[key] = id;
    return id;
  };
  // Values with one pixel per channel (spatial dimensions all 1): a global pool's output, and
  // what an activation or a 1 x 1 unpadded convolution makes of one (a squeeze-and-excitation
  // block's two convolutions read such values), whatever the image's size. And the images'
  // sizes where the graph's inputs declare them (NCHW, spatial dimensions fixed), followed
  // through convolutions, pools, activations and elementwise Add, Sub, Mul and Div. The nodes
  // are in the graph's order.
  std::unordered_set<int> one_pixel;
  std::unordered_map<int, std::vector<int64_t>> spatial;
  for (int id : g.inputs) {
    const TypeInfo& t = g.values[id].declared;
    if (!t.rank_known || t.dims.size() < 3 || g.initializers.count(id)) continue;  // (an old model's weight)
    std::vector<int64_t> sp(t.dims.begin() + 2, t.dims.end());
    if (std::all_of(sp.begin(), sp.end(), [](int64_t v) { return v > 0; })) spatial[id] = sp;
  }
  for (const Node& n : g.nodes) {
    if (n.outputs.size() != 1 || n.inputs.empty() || n.outputs[0] < 0) continue;
    const int out = n.outputs[0];
    const auto in = spatial.find(n.inputs[0]);
    if (m.plain(n, "GlobalAveragePool") || m.plain(n, "GlobalMaxPool")) {
      one_pixel.insert(out);
      if (in != spatial.end()) spatial[out] = std::vector<int64_t>(in->second.size(), 1);
      continue;
    }
    const Tensor* w = m.plain(n, "Conv") && n.inputs.size() >= 2 ? m.constant(n.inputs[1]) : nullptr;
    if (one_pixel.count(n.inputs[0]) && ((w && one_by_one_unpadded(n, *w)) || activation_of(m, n))) one_pixel.insert(out);
    if (in == spatial.end()) continue;
    if (w && w->rank() == in->second.size() + 2) {
      if (auto e = window_extents(n, in->second, std::vector<int64_t>(w->shape().dims().begin() + 2, w->shape().dims().end())))
        spatial[out] = *e;
    } else if (m.plain(n, "MaxPool") || m.plain(n, "AveragePool")) {
      if (const Attribute* k = n.find_attribute("kernel_shape"))
        if (auto e = window_extents(n, in->second, k->ints)) spatial[out] = *e;
    } else if (activation_of(m, n) || m.plain(n, "BatchNormalization")) {
      spatial[out] = in->second;
    } else if ((m.plain(n, "Add") || m.plain(n, "Sub") || m.plain(n, "Mul") || m.plain(n, "Div")) &&
               n.inputs.size() == 2) {
      const auto other = spatial.find(n.inputs[1]);
      if (other == spatial.end() || other->second.size() != in->second.size()) continue;
      std::vector<int64_t> e(in->second.size());
      bool ok = true;
      for (size_t d = 0; d < e.size(); ++d) {
        const int64_t a = in->second[d], b = other->second[d];
        ok = ok && (a == b || a == 1 || b == 1);
        e[d] = std::max(a, b);
      }
      if (ok) spatial[out] = e;
    }
  }
  // Pixels a convolution writes, where known (0: not known).
  auto pixels_out = [&](int id) -> int64_t {
    const auto it = spatial.find(id);
    if (it == spatial.end()) return 0;
    int64_t p = 1;
    for (int64_t v : it->second) p *= v;
    return p;
  };
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    const Node& mm = g.nodes[k];
    if (removed[k] || mm.outputs.size() != 1) continue;
    // A float32 convolution, then a residual Add (not for grouped convolutions), then an
    // activation, each optional.
    if (m.plain(mm, "Conv") && mm.inputs.size() >= 2) {
      const Tensor* wt = m.constant(mm.inputs[1]);
      if (!wt || wt->dtype() != DType::kFloat32 || removed[k]) continue;
      std::vector<int> inputs = mm.inputs;
      inputs.resize(3, -1);
      std::vector<size_t> chain;
      size_t last = k;
      int out = mm.outputs[0];
      // (An Add or activation another convolution's chain took already is not this one's: the
      // convolution may still fuse alone, for its weights' form. ResNet's downsampling
      // convolutions: the block's last convolution takes the residual Add they share.)
      auto taken = [&](const Node* n) { return removed[static_cast<size_t>(g.values[n->outputs[0]].producer)]; };
      if (Node* add = sole_reader(out); add && Matcher::attr_int(mm, "group", 1) == 1 && m.plain(*add, "Add") &&
                                        add->inputs.size() == 2 && add->inputs[0] != add->inputs[1] && !taken(add)) {
        inputs.push_back(other_input(*add, out));
        chain.push_back(last);
        last = static_cast<size_t>(g.values[add->outputs[0]].producer);
        out = add->outputs[0];
      }
      std::vector<Attribute> attrs = mm.attributes;
      if (Node* a = sole_reader(out); a && a->inputs[0] == out && !taken(a)) {
        if (auto act = activation_of(m, *a)) {
          chain.push_back(last);
          last = static_cast<size_t>(g.values[a->outputs[0]].producer);
          out = a->outputs[0];
          attrs.insert(attrs.end(), act->begin(), act->end());
          ++r.conv_activations;
        }
      }
      // Large weights (cpu::conv_panels_pay) kept as the products' packed right-hand operand,
      // each group's W^T (cpu::pack_b), when this convolution alone reads them: the pixels
      // become the product's rows (ops/conv_pool.cpp, conv_forward_panels).
      const int w = mm.inputs[1];
      const int64_t group = Matcher::attr_int(mm, "group", 1);
      int64_t mg = 0, kg = 0;
      if (wt->on_host() && wt->rank() >= 3 && group > 0 && wt->shape()[0] > 0 && wt->shape()[0] % group == 0 &&
          reads_left[w] == 1 && !m.outputs.count(w) && !g.values[w].is_input) {
        mg = wt->shape()[0] / group;
        kg = wt->numel() / wt->shape()[0];
      }
      // A 3 x 3 convolution of stride 1, dilation 1, one group and enough channels
      // (cpu::winograd_tile), when it alone reads its weights: transformed for Winograd's
      // F(2x2, 3x3) or F(4x4, 3x3) (cpu::winograd_weights, [16 or 36, M, C]; ops/conv_pool.cpp).
      // Before panels: it does 2.25 or 4 times fewer multiplications.
      const int winograd = mg > 0 && group == 1 && wt->rank() == 4 && wt->shape()[2] == 3 && wt->shape()[3] == 3 &&
                                   winograd_geometry(mm)
                               ? cpu::winograd_tile(wt->shape()[0], wt->shape()[1])
                               : 0;
      // A convolution of one pixel (a squeeze-and-excitation block's) is a one-row product: kept
      // in panels, its weights stream once with every lane busy, where as the left operand of
      // Y = W X each output is a dot product reduced across the lanes (0.9 MiB of weights:
      // 73-109 against about 40 us in mobilenet_v3 on one core of an AMD EPYC).
      // So is a 1 x 1 one over a small image where the graph declares its size
      // (cpu::conv_panels_pay_for: up to 64 pixels, mobilenet_v3's 7 x 7 stages; up to 256 where
      // it reads at least twice the channels it writes).
      const bool pixel = one_pixel.count(mm.inputs[0]) && one_by_one_unpadded(mm, *wt) && mg % cpu::kPanel == 0;
      const bool small = one_by_one_unpadded(mm, *wt) && cpu::conv_panels_pay_for(mg, kg, pixels_out(mm.outputs[0]));
      const bool panels = !winograd && mg > 0 && (cpu::conv_panels_pay(mg, kg) || pixel || small);
      if ((chain.empty() && !panels && !winograd) || removed[last]) continue;
      bool free = true;
      for (size_t c : chain) free = free && !removed[c];
      if (!free) continue;
      for (size_t c : chain) removed[c] = true;
      removed[last] = true;
      r.conv_residuals += inputs.size() > 3;
      r.nodes_removed += static_cast<int>(chain.size());
      if (winograd) {
        const int64_t cout = wt->shape()[0], cin = wt->shape()[1];
        Tensor u(DType::kFloat32, Shape{(winograd + 2) * (winograd + 2), cout, cin});
        cpu::winograd_weights(wt->data<float>(), cout, cin, winograd, u.data<float>());
        inputs[1] = add_initializer(g, g.values[w].name + "/winograd", std::move(u));
        attrs.push_back(make_int_attr("w_winograd", winograd));
        ++r.conv_winograd;
        if (--reads_left[w] == 0 && g.initializers.erase(w)) g.values[w].is_initializer = false;
      }
      if (panels) {  // (mg a multiple of 16: the packed form holds exactly W's values)
        Tensor p(DType::kFloat32, wt->shape());
        for (int64_t gi = 0; gi < group; ++gi)
          cpu::pack_b(wt->data<float>() + gi * mg * kg, kg, true, kg, mg, p.data<float>() + gi * mg * kg);
        inputs[1] = add_initializer(g, g.values[w].name + "/panels", std::move(p));
        attrs.push_back(make_int_attr("w_panels", 1));
        ++r.conv_panels;
        // (The original goes now, as a dense node's does.)
        if (--reads_left[w] == 0 && g.initializers.erase(w)) g.values[w].is_initializer = false;
      }
      replace.emplace_back(last, make_node(mm.name + "/fused", "onyx", "FusedConv", 1, std::move(inputs), {out},
                                            std::move(attrs)));
      continue;
    }
    const bool is_matmul = m.plain(mm, "MatMul") && mm.inputs.size() == 2;
    const bool is_gemm = m.plain(mm, "Gemm") && mm.inputs.size() >= 2;
    if (!is_matmul && !is_gemm) continue;
    const int x = mm.inputs[0], w = mm.inputs[1];
    const Tensor* wt = m.constant(w);
    if (!wt || !wt->on_host() || wt->dtype() != DType::kFloat32 || wt->rank() != 2) continue;
    bool trans = false;
    int bias = -1;
    float alpha = 1.f, beta = 1.f;  // Gemm's: folded into the packed weight and the bias
    if (is_gemm) {
      if (Matcher::attr_int(mm, "transA", 0) != 0) continue;
      trans = Matcher::attr_int(mm, "transB", 0) != 0;
      if (const Attribute* a = mm.find_attribute("alpha")) alpha = a->f;
      if (const Attribute* b = mm.find_attribute("beta")) beta = b->f;
      if (mm.inputs.size() > 2 && mm.inputs[2] >= 0) bias = mm.inputs[2];
    }
    const int64_t kk = wt->shape()[trans ? 1 : 0], n = wt->shape()[trans ? 0 : 1];
    auto row_of_n = [&](int id, int max_rank) {
      const Tensor* t = m.constant(id);
      if (!t || !t->on_host() || t->dtype() != DType::kFloat32 || t->numel() != n || t->rank() < 1) return false;
      if (static_cast<int>(t->rank()) > max_rank) return false;
      return t->shape()[t->rank() - 1] == n;
    };
    if (bias >= 0 && !row_of_n(bias, 2)) continue;
    if (bias >= 0 && beta == 0.f) bias = -1;  // C times 0 is not read (as the Gemm kernel does)
    const bool bias_is_c = bias >= 0;
    bool absorbed_add = false, absorbed_act = false;
    std::vector<int> chain;
    int out = mm.outputs[0];
    size_t last = k;
    // A bias Add: its rank must not raise the product's (X's rank, where the graph shows it).
    if (bias < 0) {
      if (Node* add = sole_reader(out); add && m.plain(*add, "Add") && add->inputs.size() == 2) {
        const int other = other_input(*add, out);
        const int xr = is_gemm ? 2 : m.rank(x);
        if (other >= 0 && row_of_n(other, std::max(xr, 1))) {
          bias = other;
          chain.push_back(static_cast<int>(last));
          last = static_cast<size_t>(m.g.values[add->outputs[0]].producer);
          out = add->outputs[0];
          absorbed_add = true;
        }
      }
    }
    // A residual Add after it (a transformer's output projection): the other operand a value
    // computed by the graph, of the output's shape (else the kernel broadcasts it).
    int residual = -1;
    if (Node* add = sole_reader(out); add && m.plain(*add, "Add") && add->inputs.size() == 2 &&
                                      add->inputs[0] != add->inputs[1]) {
      const int other = other_input(*add, out);
      if (other >= 0 && !m.constant(other)) {
        residual = other;
        chain.push_back(static_cast<int>(last));
        last = static_cast<size_t>(m.g.values[add->outputs[0]].producer);
        out = add->outputs[0];
      }
    }
    std::vector<Attribute> attrs{make_int_attr("k", kk), make_int_attr("n", n)};
    if (Node* a = sole_reader(out); a && a->inputs[0] == out) {
      if (auto act = activation_of(m, *a)) {
        chain.push_back(static_cast<int>(last));
        last = static_cast<size_t>(m.g.values[a->outputs[0]].producer);
        out = a->outputs[0];
        attrs.insert(attrs.end(), act->begin(), act->end());
        absorbed_act = true;
      }
    }
    bool free = !removed[last];
    for (int c : chain) free = free && !removed[c];
    if (!free) continue;
    for (int c : chain) removed[c] = true;
    removed[last] = true;
    r.biases += absorbed_add;
    r.activations += absorbed_act;
    if (bias_is_c && beta != 1.f) {  // Gemm's beta C, computed once
      unpacked.insert(bias);
      Tensor scaled = m.constant(bias)->clone();
      for (float& v : std::span<float>(scaled.data<float>(), static_cast<size_t>(scaled.numel()))) v *= beta;
      bias = add_initializer(g, g.values[bias].name + "/scaled", std::move(scaled));
    }
    std::vector<int> inputs{x, packed(w, trans, kk, n, alpha), bias};
    if (residual >= 0) inputs.push_back(residual);
    r.residuals += residual >= 0;
    replace.emplace_back(last, make_node(mm.name + "/dense", "onyx", "DenseMatMul", 1, std::move(inputs), {out},
                                          std::move(attrs)));
    unpacked.insert(w);
    // The original goes as soon as nothing else reads it, not at the pass's end: the load's
    // peak holds one weight twice, not every weight.
    if (--reads_left[w] == 0 && !m.outputs.count(w) && !g.values[w].is_input && g.initializers.erase(w))
      g.values[w].is_initializer = false;
    ++r.dense;
    r.nodes_removed += static_cast<int>(chain.size());
  }
  replace_nodes(g, removed, replace);
  // The unpacked weights nothing reads any more are dropped (their memory too, unless mapped).
  std::unordered_set<int> read(g.outputs.begin(), g.outputs.end());
  for (const auto& node : g.nodes) {
    read.insert(node.inputs.begin(), node.inputs.end());
    read.insert(node.implicit_inputs.begin(), node.implicit_inputs.end());
  }
  for (int id : unpacked)
    if (!read.count(id) && !g.values[id].is_input && g.initializers.erase(id)) g.values[id].is_initializer = false;
  return r;
}

}  // namespace onyx
