#include "passes/fold_constants.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "ops/compute.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

bool has_subgraph(const Node& n) {
  for (const auto& a : n.attributes)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

bool quantization_op(const Node& n) {
  if (!n.domain.empty() && n.domain != "ai.onnx" && n.domain != "com.microsoft") return false;
  return n.op_type == "QuantizeLinear" || n.op_type == "DequantizeLinear" || n.op_type == "DynamicQuantizeLinear";
}

bool onnx_op(const Node& n, const char* op) { return n.op_type == op && (n.domain.empty() || n.domain == "ai.onnx"); }

// The dimensions of value `id` that the graph fixes at load (-1 where it does not), or nullopt
// where its rank is not known. Followed through the ops whose output dimensions follow from
// their inputs' dimensions and constants alone: Reshape by a shape made of constant pieces
// (a Concat of them), Transpose, Unsqueeze, Gather, Shape, and ops that keep their input's shape.
class StaticDims {
 public:
  explicit StaticDims(const Graph& g) : g_(g) {}

  std::optional<std::vector<int64_t>> of(int id, int depth = 0) {
    if (id < 0 || depth > 64) return std::nullopt;
    if (auto it = memo_.find(id); it != memo_.end()) return it->second;
    auto d = compute(id, depth);
    memo_[id] = d;
    return d;
  }

 private:
  const Tensor* constant(int id) const { return constant_value(g_, id); }
  // A constant integer list (or scalar).
  std::optional<std::vector<int64_t>> ints(int id) const {
    const Tensor* t = constant(id);
    if (!t || !t->on_host() || t->rank() > 1 || (t->dtype() != DType::kInt64 && t->dtype() != DType::kInt32))
      return std::nullopt;
    return t->to_int64_vector();
  }
  // A 1-D value's entries where the graph fixes them (-1 where it does not; used for the
  // shape input of a Reshape): a constant, or a Concat of constants and one-entry pieces.
  std::optional<std::vector<int64_t>> entries(int id, std::vector<bool>& fixed, int depth) {
    fixed.clear();
    if (auto c = ints(id)) {
      fixed.assign(c->size(), true);
      return c;
    }
    const int p = id >= 0 ? g_.values[id].producer : -1;
    if (p < 0) return std::nullopt;
    const Node& n = g_.nodes[p];
    if (!onnx_op(n, "Concat")) return std::nullopt;
    std::vector<int64_t> out;
    for (int in : n.inputs) {
      if (auto c = ints(in)) {
        out.insert(out.end(), c->begin(), c->end());
        fixed.insert(fixed.end(), c->size(), true);
        continue;
      }
      const auto d = of(in, depth + 1);  // a piece of unknown value: its length must be fixed
      if (!d || d->size() != 1 || (*d)[0] < 0) return std::nullopt;
      out.insert(out.end(), static_cast<size_t>((*d)[0]), -1);
      fixed.insert(fixed.end(), static_cast<size_t>((*d)[0]), false);
    }
    return out;
  }

  std::optional<std::vector<int64_t>> compute(int id, int depth) {
    if (const Tensor* t = constant(id)) return t->shape().dims();
    const Value& v = g_.values[id];
    std::optional<std::vector<int64_t>> declared;
    if (v.declared.category == TypeInfo::Category::kTensor && v.declared.rank_known) {
      declared = v.declared.dims;
      for (int64_t& x : *declared)
        if (x < 0) x = -1;
    }
    auto derived = from_producer(id, depth);
    if (!declared) return derived;
    if (!derived || derived->size() != declared->size()) return declared;
    for (size_t i = 0; i < declared->size(); ++i)
      if ((*declared)[i] < 0) (*declared)[i] = (*derived)[i];
    return declared;
  }

  std::optional<std::vector<int64_t>> from_producer(int id, int depth) {
    const int p = g_.values[id].producer;
    if (p < 0) return std::nullopt;
    const Node& n = g_.nodes[p];
    if (n.outputs.empty() || n.outputs[0] != id || n.inputs.empty()) return std::nullopt;
    static const char* kKeeps[] = {"Cast", "Identity", "Neg", "Relu", "Sigmoid", "Tanh", "Erf", "Sqrt",
                                   "Reciprocal", "Exp", "Abs", "Softmax", "LayerNormalization", "Cos", "Sin"};
    for (const char* op : kKeeps)
      if (onnx_op(n, op)) return of(n.inputs[0], depth + 1);
    if (onnx_op(n, "Transpose")) {
      auto in = of(n.inputs[0], depth + 1);
      if (!in) return std::nullopt;
      std::vector<int64_t> perm;
      if (const Attribute* a = n.find_attribute("perm")) perm = a->ints;
      else
        for (int64_t i = static_cast<int64_t>(in->size()) - 1; i >= 0; --i) perm.push_back(i);
      if (perm.size() != in->size()) return std::nullopt;
      std::vector<int64_t> out;
      for (int64_t axis : perm) {
        if (axis < 0 || axis >= static_cast<int64_t>(in->size())) return std::nullopt;
        out.push_back((*in)[static_cast<size_t>(axis)]);
      }
      return out;
    }
    if (onnx_op(n, "Reshape") && n.inputs.size() == 2) {
      std::vector<bool> fixed;
      auto shape = entries(n.inputs[1], fixed, depth);
      if (!shape) return std::nullopt;
      const bool allowzero = n.opset >= 14 && Matcher_attr(n, "allowzero") != 0;
      auto in = of(n.inputs[0], depth + 1);
      std::vector<int64_t> out(shape->size(), -1);
      int infer_at = -1;
      int64_t known = 1;
      bool all_known = true;
      for (size_t i = 0; i < shape->size(); ++i) {
        const int64_t e = (*shape)[i];
        if (!fixed[i]) {
          all_known = false;
          continue;
        }
        if (e > 0 || (e == 0 && allowzero)) out[i] = e;
        else if (e == 0) out[i] = in && i < in->size() ? (*in)[i] : -1;
        else if (e == -1) infer_at = static_cast<int>(i);
        else return std::nullopt;
        if (out[i] >= 0) known *= out[i];
        else if (e != -1) all_known = false;
      }
      // The -1 entry, where every other one and the input's size are fixed.
      if (infer_at >= 0 && all_known && in && known > 0) {
        int64_t total = 1;
        for (int64_t x : *in) {
          if (x < 0) return out;
          total *= x;
        }
        if (total % known == 0) out[static_cast<size_t>(infer_at)] = total / known;
      }
      return out;
    }
    // Broadcasting arithmetic: where one side's dimension is fixed and not 1, a valid graph's
    // output has it.
    if ((onnx_op(n, "Add") || onnx_op(n, "Sub") || onnx_op(n, "Mul") || onnx_op(n, "Div") || onnx_op(n, "Pow")) &&
        n.inputs.size() == 2) {
      auto a = of(n.inputs[0], depth + 1), b = of(n.inputs[1], depth + 1);
      if (!a || !b) return std::nullopt;
      const size_t r = std::max(a->size(), b->size());
      std::vector<int64_t> out(r, -1);
      for (size_t i = 0; i < r; ++i) {
        const int64_t x = i + a->size() >= r ? (*a)[i + a->size() - r] : 1;
        const int64_t y = i + b->size() >= r ? (*b)[i + b->size() - r] : 1;
        if (x > 1 || (x >= 0 && x == y)) out[i] = x;
        else if (y > 1) out[i] = y;
        else if (x == 1 && y == 1) out[i] = 1;
        else if (x == 0 || y == 0) out[i] = (x == 0 && (y == 0 || y == 1)) || (y == 0 && x == 1) ? 0 : -1;
      }
      return out;
    }
    if (onnx_op(n, "Concat")) {  // the inputs' sum along the axis
      std::optional<std::vector<int64_t>> out;
      const int64_t axis = Matcher_attr(n, "axis");
      for (int in : n.inputs) {
        auto d = of(in, depth + 1);
        if (!d || d->empty()) return std::nullopt;
        const int64_t r = static_cast<int64_t>(d->size()), a = axis < 0 ? axis + r : axis;
        if (a < 0 || a >= r || (out && out->size() != d->size())) return std::nullopt;
        if (!out) {
          out = d;
          continue;
        }
        for (size_t i = 0; i < d->size(); ++i) {
          if (static_cast<int64_t>(i) == a)
            (*out)[i] = (*out)[i] >= 0 && (*d)[i] >= 0 ? (*out)[i] + (*d)[i] : -1;
          else if ((*out)[i] < 0)
            (*out)[i] = (*d)[i];
        }
      }
      return out;
    }
    if (onnx_op(n, "Slice") && n.opset >= 10 && n.inputs.size() >= 3) {  // constant bounds
      auto in = of(n.inputs[0], depth + 1);
      auto range = slice_range(n, in);
      if (!in || !range) return in ? std::optional<std::vector<int64_t>>(std::vector<int64_t>(in->size(), -1)) : std::nullopt;
      std::vector<int64_t> out = *in;
      for (const auto& [axis, start, end] : *range) out[static_cast<size_t>(axis)] = std::max<int64_t>(0, end - start);
      return out;
    }
    if (onnx_op(n, "Unsqueeze")) {
      auto in = of(n.inputs[0], depth + 1);
      std::optional<std::vector<int64_t>> axes;
      if (n.inputs.size() > 1) axes = ints(n.inputs[1]);
      else if (const Attribute* a = n.find_attribute("axes")) axes = a->ints;
      if (!in || !axes) return std::nullopt;
      const int64_t r = static_cast<int64_t>(in->size() + axes->size());
      std::vector<bool> one(static_cast<size_t>(r), false);
      for (int64_t a : *axes) {
        if (a < 0) a += r;
        if (a < 0 || a >= r || one[static_cast<size_t>(a)]) return std::nullopt;
        one[static_cast<size_t>(a)] = true;
      }
      std::vector<int64_t> out;
      size_t j = 0;
      for (int64_t i = 0; i < r; ++i) out.push_back(one[static_cast<size_t>(i)] ? 1 : (*in)[j++]);
      return out;
    }
    if (onnx_op(n, "Shape")) {
      auto in = of(n.inputs[0], depth + 1);
      if (!in) return std::vector<int64_t>{-1};  // 1-D, of the input's rank
      int64_t start = 0, end = static_cast<int64_t>(in->size());
      shape_range(n, static_cast<int64_t>(in->size()), start, end);
      return std::vector<int64_t>{std::max<int64_t>(0, end - start)};
    }
    // A reduction over constant axes (an attribute, or input 1 from opset 18; ReduceSum from 13;
    // none: every axis, unless noop_with_empty_axes): the other dimensions, the reduced ones 1 or
    // dropped (keepdims).
    if (onnx_op(n, "ReduceMean") || onnx_op(n, "ReduceSum") || onnx_op(n, "ReduceMax") || onnx_op(n, "ReduceMin")) {
      auto in = of(n.inputs[0], depth + 1);
      if (!in) return std::nullopt;
      std::optional<std::vector<int64_t>> axes;
      if (n.inputs.size() > 1 && n.inputs[1] >= 0) axes = ints(n.inputs[1]);
      else if (const Attribute* a = n.find_attribute("axes")) axes = a->ints;
      else axes.emplace();
      if (!axes || (axes->empty() && Matcher_attr_or(n, "noop_with_empty_axes", 0) != 0)) return std::nullopt;
      const int64_t r = static_cast<int64_t>(in->size());
      std::vector<bool> reduced(in->size(), axes->empty());
      for (int64_t a : *axes) {
        if (a < 0) a += r;
        if (a < 0 || a >= r) return std::nullopt;
        reduced[static_cast<size_t>(a)] = true;
      }
      const bool keep = Matcher_attr_or(n, "keepdims", 1) != 0;
      std::vector<int64_t> out;
      for (size_t i = 0; i < in->size(); ++i) {
        if (!reduced[i]) out.push_back((*in)[i]);
        else if (keep) out.push_back(1);
      }
      return out;
    }
    // A product by a 2-D constant weight: x's dimensions but the last, then the weight's outputs
    // (MatMul's B is [K, N]; onyx::Linear's weight [N, K], its outputs cut by `splits`).
    const bool linear = n.domain == "onyx" && n.op_type == "Linear" && n.inputs.size() == 2;
    if ((onnx_op(n, "MatMul") && n.inputs.size() == 2) || linear) {
      const Tensor* w = constant(n.inputs[1]);
      auto in = of(n.inputs[0], depth + 1);
      if (!w || w->rank() != 2 || !in || in->size() < 2) return std::nullopt;
      int64_t width = linear ? w->shape()[0] : w->shape()[1];
      if (const Attribute* sp = linear ? n.find_attribute("splits") : nullptr; sp && !sp->ints.empty()) {
        if (sp->ints.size() != n.outputs.size()) return std::nullopt;
        width = sp->ints[static_cast<size_t>(std::find(n.outputs.begin(), n.outputs.end(), id) - n.outputs.begin())];
      }
      std::vector<int64_t> out(in->begin(), in->end() - 1);
      out.push_back(width);
      return out;
    }
    if (onnx_op(n, "Gather") && n.inputs.size() == 2) {
      auto data = of(n.inputs[0], depth + 1), idx = of(n.inputs[1], depth + 1);
      if (!data || !idx || data->empty()) return std::nullopt;
      int64_t axis = Matcher_attr(n, "axis");
      if (axis < 0) axis += static_cast<int64_t>(data->size());
      if (axis < 0 || axis >= static_cast<int64_t>(data->size())) return std::nullopt;
      std::vector<int64_t> out(data->begin(), data->begin() + axis);
      out.insert(out.end(), idx->begin(), idx->end());
      out.insert(out.end(), data->begin() + axis + 1, data->end());
      return out;
    }
    return std::nullopt;
  }

 public:
  // A Slice with constant starts, ends and axes and steps of 1, over a value whose dimensions
  // along those axes are fixed: (axis, start, end) per sliced axis, clamped; nullopt otherwise.
  std::optional<std::vector<std::tuple<int64_t, int64_t, int64_t>>> slice_range(
      const Node& n, const std::optional<std::vector<int64_t>>& in) const {
    if (!in) return std::nullopt;
    const auto st = ints(n.inputs[1]), en = ints(n.inputs[2]);
    if (!st || !en || st->size() != en->size()) return std::nullopt;
    std::vector<int64_t> axes;
    if (n.inputs.size() > 3 && n.inputs[3] >= 0) {
      auto a = ints(n.inputs[3]);
      if (!a || a->size() != st->size()) return std::nullopt;
      axes = *a;
    } else {
      for (size_t i = 0; i < st->size(); ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (n.inputs.size() > 4 && n.inputs[4] >= 0) {
      auto steps = ints(n.inputs[4]);
      if (!steps || steps->size() != st->size()) return std::nullopt;
      for (int64_t x : *steps)
        if (x != 1) return std::nullopt;
    }
    const int64_t r = static_cast<int64_t>(in->size());
    std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
    for (size_t i = 0; i < axes.size(); ++i) {
      const int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
      if (a < 0 || a >= r) return std::nullopt;
      const int64_t dim = (*in)[static_cast<size_t>(a)];
      if (dim < 0) return std::nullopt;
      auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
      out.emplace_back(a, clampi((*st)[i]), clampi((*en)[i]));
    }
    return out;
  }

  static int64_t Matcher_attr(const Node& n, const char* name) { return Matcher_attr_or(n, name, 0); }
  static int64_t Matcher_attr_or(const Node& n, const char* name, int64_t fallback) {
    const Attribute* a = n.find_attribute(name);
    return a ? a->i : fallback;
  }


 private:
  const Graph& g_;
  std::unordered_map<int, std::optional<std::vector<int64_t>>> memo_;
};

// A Shape of a value whose dimensions the graph fixes, or an entry of one (Gather by a constant
// index), as a constant: the shape arithmetic after it then folds too (the TorchScript
// exporter slices a head in halves at Shape(x)[-1] / 2).
std::optional<Tensor> static_shape_value(const Graph& g, const Node& n, StaticDims& dims) {
  if (onnx_op(n, "Shape") && n.inputs.size() == 1) {
    auto d = dims.of(n.inputs[0]);
    if (!d) return std::nullopt;
    int64_t start, end;
    shape_range(n, static_cast<int64_t>(d->size()), start, end);
    std::vector<int64_t> v(d->begin() + start, d->begin() + std::max(start, end));
    for (int64_t x : v)
      if (x < 0) return std::nullopt;
    return Tensor::from_vector(v, Shape({static_cast<int64_t>(v.size())}));
  }
  if (onnx_op(n, "Gather") && n.inputs.size() == 2 && StaticDims::Matcher_attr(n, "axis") == 0) {
    const int s = n.inputs[0];
    const int p = s >= 0 ? g.values[s].producer : -1;
    if (p < 0 || !onnx_op(g.nodes[p], "Shape") || g.nodes[p].inputs.size() != 1) return std::nullopt;
    const Tensor* index = constant_value(g, n.inputs[1]);
    if (!index || !index->on_host() || index->rank() > 1 ||
        (index->dtype() != DType::kInt64 && index->dtype() != DType::kInt32))
      return std::nullopt;
    auto d = dims.of(g.nodes[p].inputs[0]);
    if (!d) return std::nullopt;
    int64_t start, end;
    shape_range(g.nodes[p], static_cast<int64_t>(d->size()), start, end);
    const int64_t len = std::max<int64_t>(0, end - start);
    std::vector<int64_t> v;
    for (int64_t i : index->to_int64_vector()) {
      if (i < 0) i += len;
      if (i < 0 || i >= len || (*d)[static_cast<size_t>(start + i)] < 0) return std::nullopt;
      v.push_back((*d)[static_cast<size_t>(start + i)]);
    }
    if (index->rank() == 0) return Tensor::scalar<int64_t>(v[0]);
    return Tensor::from_vector(v, Shape({static_cast<int64_t>(v.size())}));
  }
  return std::nullopt;
}

}  // namespace

// What a folded node may allocate beyond the bytes that folding keeps (kernels' temporaries).
static constexpr size_t kFoldScratchBytes = size_t{64} << 20;

FoldReport fold_constants(Graph& g, const OpRegistry& registry, size_t growth_allowance) {
  FoldReport r;
  std::unordered_set<int> outputs(g.outputs.begin(), g.outputs.end());
  // A constant: an initializer that is not also a graph input (an input with a default can be
  // fed), or a Constant node's value.
  auto constant = [&](int id) -> const Tensor* {
    return id >= 0 && !g.values[id].is_input ? constant_value(g, id) : nullptr;
  };
  std::vector<bool> folded(g.nodes.size(), false);
  std::unordered_set<int> read_by_folded;
  StaticDims dims(g);
  auto keep = [&](size_t k, std::vector<Tensor> outs) {
    Node& n = g.nodes[k];
    for (size_t o = 0; o < n.outputs.size(); ++o) {
      const int id = n.outputs[o];
      if (id < 0 || o >= outs.size() || !outs[o].defined()) continue;
      // (A view keeps its input's storage alive, mapped or not.)
      g.initializers[id] = outs[o];
      Value& v = g.values[id];
      v.is_initializer = true;
      v.declared.category = TypeInfo::Category::kTensor;
      v.declared.dtype = outs[o].dtype();
      v.declared.rank_known = true;
      v.declared.dims = outs[o].shape().dims();
      v.declared.dim_params.assign(v.declared.dims.size(), "");
      g.values[id].producer = -1;
    }
    for (int id : n.inputs)
      if (id >= 0) read_by_folded.insert(id);
    folded[k] = true;
    ++r.nodes;
    r.ops.push_back(n.op_type);
  };
  for (size_t k = 0; k < g.nodes.size(); ++k) {
    Node& n = g.nodes[k];
    if (n.inputs.empty() || !n.implicit_inputs.empty() || has_subgraph(n) || quantization_op(n)) continue;
    if (n.outputs.size() == 1 && n.outputs[0] >= 0 && !outputs.count(n.outputs[0]))
      if (auto t = static_shape_value(g, n, dims)) {
        r.bytes += t->bytes();
        ++r.shapes;
        keep(k, {*t});
        continue;
      }
    bool all_constant = true;
    size_t in_bytes = 0;
    for (int id : n.inputs) {
      if (id < 0) continue;
      const Tensor* c = constant(id);
      if (!c) {
        all_constant = false;
        break;
      }
      in_bytes += c->bytes();
    }
    if (!all_constant) continue;
    if (std::any_of(n.outputs.begin(), n.outputs.end(), [&](int o) { return o >= 0 && outputs.count(o); })) continue;
    const OpDef* def = registry.find(n.domain, n.op_type, n.opset);
    if (!def || !def->foldable) continue;
    n.def = def;
    std::vector<const Tensor*> in;
    for (int id : n.inputs) in.push_back(id >= 0 ? constant(id) : nullptr);
    std::vector<Tensor> outs;
    // The node computes under a budget of what folding may keep (and some scratch), so a
    // constant node asking for more (a huge ConstantOfShape) is refused before its memory
    // is taken, and left to run under the session's host memory budget.
    auto alloc = make_cpu_allocator();
    alloc->set_budget(in_bytes + growth_allowance + kFoldScratchBytes);
    try {
      outs = compute_node(n, in, *alloc);
    } catch (const Error&) {
      continue;  // the node's own error comes when it runs, with the run's context
    }
    size_t out_bytes = 0;
    for (const auto& t : outs) out_bytes += t.defined() ? t.bytes() : 0;
    if (out_bytes > in_bytes + growth_allowance) continue;
    r.bytes += out_bytes;
    keep(k, std::move(outs));
  }
  // A Slice that keeps all of its input (the first `d` entries of an axis of `d`) is its input,
  // and a Concat input of no entries along the axis goes (Phi-3's rotary embeddings slice the
  // head at the rotary size, which is all of it, and concatenate the empty rest).
  {
    const std::unordered_set<int> keep = pinned_values(g);
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      Node& n = g.nodes[k];
      if (folded[k] || n.outputs.size() != 1 || n.outputs[0] < 0) continue;
      if (onnx_op(n, "Slice") && n.opset >= 10 && n.inputs.size() >= 3 && n.inputs[0] >= 0 && !keep.count(n.outputs[0])) {
        const auto range = dims.slice_range(n, dims.of(n.inputs[0]));
        if (!range) continue;
        const auto in = dims.of(n.inputs[0]);
        bool whole = true;
        for (const auto& [axis, start, end] : *range) whole = whole && start == 0 && end == (*in)[static_cast<size_t>(axis)];
        if (!whole) continue;
        redirect_reads(g, n.outputs[0], n.inputs[0]);
        folded[k] = true;
        ++r.identities;
      } else if (onnx_op(n, "Concat") && n.inputs.size() > 1) {
        const int64_t axis = StaticDims::Matcher_attr(n, "axis");
        std::vector<int> kept_inputs;
        for (int in : n.inputs) {
          const auto d = dims.of(in);
          const int64_t rk = d ? static_cast<int64_t>(d->size()) : 0, a = axis < 0 ? axis + rk : axis;
          const bool empty = d && a >= 0 && a < rk && (*d)[static_cast<size_t>(a)] == 0;
          if (!empty) kept_inputs.push_back(in);
        }
        if (kept_inputs.size() == n.inputs.size() || kept_inputs.empty()) continue;
        r.identities += static_cast<int>(n.inputs.size() - kept_inputs.size());
        n.inputs = std::move(kept_inputs);
      }
    }
  }
  if (!r.nodes && !r.identities) return r;
  // A Shape node whose readers all folded (its entries taken one by one) goes too, and so does a
  // Constant node that only folded nodes read.
  {
    std::unordered_map<int, int> readers;
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      if (folded[k]) continue;
      for (int id : g.nodes[k].inputs) ++readers[id];
      for (int id : g.nodes[k].implicit_inputs) ++readers[id];
    }
    for (size_t k = 0; k < g.nodes.size(); ++k) {
      const Node& n = g.nodes[k];
      const bool shape = onnx_op(n, "Shape");
      if (folded[k] || !(shape || onnx_op(n, "Constant")) || n.outputs.size() != 1 || n.outputs[0] < 0) continue;
      if (readers[n.outputs[0]] || outputs.count(n.outputs[0])) continue;
      folded[k] = true;
      if (shape) ++r.dead_shapes;
      for (int id : n.inputs)
        if (id >= 0) read_by_folded.insert(id);
    }
  }
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t k = 0; k < g.nodes.size(); ++k)
    if (!folded[k]) kept.push_back(std::move(g.nodes[k]));
  g.nodes = std::move(kept);
  for (auto& v : g.values) v.producer = -1;
  for (size_t k = 0; k < g.nodes.size(); ++k)
    for (int o : g.nodes[k].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(k);
  // Initializers only folded nodes read are dropped (their memory too, unless mapped).
  std::unordered_set<int> read;
  for (const auto& n : g.nodes) {
    read.insert(n.inputs.begin(), n.inputs.end());
    read.insert(n.implicit_inputs.begin(), n.implicit_inputs.end());
  }
  for (int id : read_by_folded)
    if (!read.count(id) && !outputs.count(id) && !g.values[id].is_input && g.initializers.erase(id)) {
      g.values[id].is_initializer = false;
      ++r.freed_initializers;
    }
  return r;
}

}  // namespace onyx
