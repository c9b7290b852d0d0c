#include "passes/shard.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "ops/gqa.h"
#include "ops/op.h"
#include "passes/rewrite_util.h"

namespace onyx {

namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) along one axis

int64_t total(const Ranges& r) {
  int64_t n = 0;
  for (auto [b, e] : r) n += e - b;
  return n;
}

class Sharder {
 public:
  Sharder(Graph& g, int rank, int world, int64_t comm) : g_(g), rank_(rank), world_(world), comm_(comm) {
    consumers_.assign(g.values.size(), {});
    for (size_t n = 0; n < g.nodes.size(); ++n)
      for (int v : g.nodes[n].inputs)
        if (v >= 0) consumers_[v].push_back(static_cast<int>(n));
    for (int v : g.outputs) graph_outputs_.insert(v);
  }

  ShardReport run() {
    for (size_t n = 0; n < g_.nodes.size(); ++n)
      if (g_.nodes[n].op_type == "GroupQueryAttention" && g_.nodes[n].domain == "com.microsoft")
        with_context(g_.nodes[n].describe(), [&] { attention(static_cast<int>(n)); });
    for (size_t n = 0; n < g_.nodes.size(); ++n)
      if (g_.nodes[n].op_type == "Mul" && g_.nodes[n].domain.empty() && !done_.count(static_cast<int>(n)))
        with_context(g_.nodes[n].describe(), [&] { gated_mlp(static_cast<int>(n)); });
    for (int out : g_.outputs) {
      const int p = g_.values[out].producer;
      if (p >= 0 && !done_.count(p) && is_product(p)) with_context(g_.nodes[p].describe(), [&] { lm_head(p, out); });
    }
    finish();
    return report_;
  }

 private:
  // A product by a constant weight: MatMul(x, W[K, N]) or MatMulNBits.
  bool is_product(int n) const {
    const Node& node = g_.nodes[n];
    if (node.op_type == "MatMul" && node.domain.empty())
      return node.inputs.size() == 2 && constant_value(g_, node.inputs[1]) &&
             constant_value(g_, node.inputs[1])->rank() == 2;
    if (node.op_type == "MatMulNBits" && node.domain == "com.microsoft")
      return node.inputs.size() >= 3 && constant_value(g_, node.inputs[1]) && constant_value(g_, node.inputs[2]);
    return false;
  }
  int64_t outputs_of(int n) const {  // N
    const Node& node = g_.nodes[n];
    if (node.op_type == "MatMul") return constant_value(g_, node.inputs[1])->shape()[1];
    return NodeView(node).attr_int("N");
  }
  int producer_of(int value) const { return value >= 0 ? g_.values[value].producer : -1; }
  int only_consumer(int value) const {
    return value >= 0 && consumers_[value].size() == 1 && !graph_outputs_.count(value) ? consumers_[value][0] : -1;
  }

  // The product's weight input replaced by `t` (a new initializer).
  void set_input(int n, size_t i, Tensor t, const char* what) {
    Node& node = g_.nodes[n];
    report_.weight_bytes += static_cast<int64_t>(t.bytes());
    replaced_.push_back(node.inputs[i]);
    node.inputs[i] = add_initializer(g_, cat(g_.values[node.inputs[i]].name, ".rank", rank_, "_", what), std::move(t));
  }
  void set_int_attr(Node& node, const char* name, int64_t v) {
    for (Attribute& a : node.attributes)
      if (a.name == name) {
        a.i = v;
        return;
      }
    node.attributes.push_back(make_int_attr(name, v));
  }
  // Whatever shape the model declared for a value this pass changes no longer holds.
  void forget_shape(int value) {
    if (value >= 0 && !graph_outputs_.count(value)) g_.values[value].declared = TypeInfo{};
  }

  // Rows [b, e) of each range of a tensor seen as `rows` rows of equal bytes, in order.
  static Tensor take_rows(const Tensor& t, int64_t rows, const Ranges& r, Shape shape) {
    const size_t row = t.bytes() / static_cast<size_t>(rows);
    Tensor out(t.dtype(), std::move(shape));
    char* o = static_cast<char*>(out.raw());
    for (auto [b, e] : r) {
      std::memcpy(o, static_cast<const char*>(t.raw()) + b * row, (e - b) * row);
      o += (e - b) * row;
    }
    return out;
  }
  // Per row of `rows`, the byte span [b, e) of each of its pieces of `piece` bytes.
  static Tensor take_within_rows(const Tensor& t, int64_t rows, size_t piece, const Ranges& r, Shape shape) {
    const size_t row = t.bytes() / static_cast<size_t>(rows);
    Tensor out(t.dtype(), std::move(shape));
    char* o = static_cast<char*>(out.raw());
    for (int64_t k = 0; k < rows; ++k)
      for (auto [b, e] : r) {
        std::memcpy(o, static_cast<const char*>(t.raw()) + k * row + b * piece, (e - b) * piece);
        o += (e - b) * piece;
      }
    return out;
  }

  // Keeps the output columns `r` of product n (and of the bias Add after it, when `add` >= 0).
  void shard_columns(int n, const Ranges& r, int add) {
    Node& node = g_.nodes[n];
    const int64_t cols = total(r);
    if (node.op_type == "MatMul") {
      const Tensor& w = *constant_value(g_, node.inputs[1]);
      const int64_t K = w.shape()[0];
      set_input(n, 1, take_within_rows(w, K, dtype_size(w.dtype()), r, Shape{K, cols}), "cols");
    } else {
      const NodeView v(node);
      const int64_t N = v.attr_int("N");
      ONYX_CHECK(!(node.inputs.size() > 4 && node.inputs[4] >= 0), "MatMulNBits with g_idx is not split by ranks");
      for (size_t i : {size_t{1}, size_t{2}, size_t{3}, size_t{5}}) {
        if (i >= node.inputs.size() || node.inputs[i] < 0) continue;
        const Tensor& t = *constant_value(g_, node.inputs[i]);
        std::vector<int64_t> dims = t.shape().dims();
        if (dims.size() == 1) dims[0] = dims[0] / N * cols;  // [N * k_blocks] scales, [N] bias
        else dims[0] = cols;
        set_input(n, i, take_rows(t, N, r, Shape(dims)), "cols");
      }
      set_int_attr(node, "N", cols);
    }
    forget_shape(node.outputs[0]);
    if (add >= 0) {
      Node& a = g_.nodes[add];
      const size_t bias = a.inputs[0] == node.outputs[0] ? 1 : 0;
      const Tensor& b = *constant_value(g_, a.inputs[bias]);
      set_input(add, bias, take_rows(b, b.numel(), r, Shape{cols}), "cols");
      forget_shape(a.outputs[0]);
    }
    done_.insert(n);
  }

  // Keeps the input rows [b, e) of product n (K); a bias inside the product stays on rank 0 only
  // (the ranks' partial products are summed after it).
  void shard_rows(int n, int64_t b, int64_t e) {
    Node& node = g_.nodes[n];
    if (node.op_type == "MatMul") {
      const Tensor& w = *constant_value(g_, node.inputs[1]);
      set_input(n, 1, take_rows(w, w.shape()[0], {{b, e}}, Shape{e - b, w.shape()[1]}), "rows");
    } else {
      const NodeView v(node);
      const int64_t N = v.attr_int("N"), block = v.attr_int("block_size"), bits = v.attr_int("bits", 4);
      ONYX_CHECK(b % block == 0 && e % block == 0, "a rank's ", e - b, " inputs of ", v.attr_int("K"),
                 " are not whole quantization blocks of ", block);
      ONYX_CHECK(!(node.inputs.size() > 4 && node.inputs[4] >= 0), "MatMulNBits with g_idx is not split by ranks");
      const int64_t kb = (v.attr_int("K") + block - 1) / block, b0 = b / block, b1 = e / block;
      const Tensor& q = *constant_value(g_, node.inputs[1]);
      set_input(n, 1, take_within_rows(q, N, q.bytes() / N / kb, {{b0, b1}}, Shape{N, b1 - b0, q.shape()[2]}), "rows");
      const Tensor& s = *constant_value(g_, node.inputs[2]);
      set_input(n, 2,
                take_within_rows(s, N, dtype_size(s.dtype()), {{b0, b1}},
                                 s.rank() == 1 ? Shape{N * (b1 - b0)} : Shape{N, b1 - b0}),
                "rows");
      if (node.inputs.size() > 3 && node.inputs[3] >= 0) {
        const Tensor& z = *constant_value(g_, node.inputs[3]);
        if (z.dtype() == DType::kUInt8) {  // packed: bits per block, whole bytes per rank
          ONYX_CHECK(b0 * bits % 8 == 0 && (b1 - b0) * bits % 8 == 0, "the packed zero points of blocks ", b0, "-",
                     b1, " do not start and end on whole bytes");
          const int64_t bytes = (b1 - b0) * bits / 8;
          set_input(n, 3, take_within_rows(z, N, 1, {{b0 * bits / 8, b1 * bits / 8}},
                                           z.rank() == 1 ? Shape{N * bytes} : Shape{N, bytes}), "rows");
        } else {
          set_input(n, 3, take_within_rows(z, N, dtype_size(z.dtype()), {{b0, b1}},
                                           z.rank() == 1 ? Shape{N * (b1 - b0)} : Shape{N, b1 - b0}), "rows");
        }
      }
      if (rank_ != 0 && node.inputs.size() > 5 && node.inputs[5] >= 0) {
        replaced_.push_back(node.inputs[5]);
        node.inputs[5] = -1;
      }
      set_int_attr(node, "K", e - b);
    }
    done_.insert(n);
  }

  // Product n's output, renamed, feeds a collective whose output is the product's old output.
  void collect(int n, const char* op, std::vector<Attribute> more) {
    Node& node = g_.nodes[n];
    const int out = node.outputs[0];
    const int partial = g_.value_id(cat(g_.values[out].name, "/rank", rank_, "_share"));
    node.outputs[0] = partial;
    std::vector<Attribute> attrs{make_int_attr("communicator", comm_), make_int_attr("rank", rank_)};
    for (Attribute& a : more) attrs.push_back(std::move(a));
    after_[n].push_back(make_node(cat(node.name, "/", op), "onyx", op, 1, {partial}, {out}, std::move(attrs)));
    ++report_.collectives;
  }

  // A column-parallel input: the product feeding `value`, maybe through a bias Add.
  std::pair<int, int> product_feeding(int value, const char* what) {
    int p = producer_of(value), add = -1;
    if (p >= 0 && g_.nodes[p].op_type == "Add" && g_.nodes[p].domain.empty()) {
      const Node& a = g_.nodes[p];
      for (size_t i = 0; i < 2 && i < a.inputs.size(); ++i) {
        const Tensor* bias = constant_value(g_, a.inputs[1 - i]);
        const int q = producer_of(a.inputs[i]);
        if (bias && bias->rank() == 1 && q >= 0 && is_product(q) && only_consumer(a.inputs[i]) == p) {
          add = p;
          p = q;
          break;
        }
      }
    }
    ONYX_CHECK(p >= 0 && is_product(p) && only_consumer(g_.nodes[p].outputs[0]) >= 0, "its ", what,
               " is not a product by a constant weight read by this node alone, which the ranks could split");
    return {p, add};
  }

  void attention(int n) {
    Node& node = g_.nodes[n];
    const NodeView v(node);
    const int64_t H = v.attr_int("num_heads"), Hkv = v.attr_int("kv_num_heads");
    ONYX_CHECK(H % world_ == 0 && Hkv % world_ == 0, "its ", H, " query heads and ", Hkv,
               " KV heads do not split evenly over ", world_, " ranks");
    const int64_t hq = H / world_, hk = Hkv / world_;
    // Inputs indexed by head are not split yet: a per-head attention_bias, head_sink, the
    // quantized cache's scales.
    auto present = [&](size_t i) { return i < node.inputs.size() && node.inputs[i] >= 0; };
    for (size_t i : {gqa::kHeadSink, gqa::kKScale, gqa::kVScale})
      ONYX_CHECK(!present(i), "its input ", i, " ('", g_.values[node.inputs[i]].name,
                 "') is per head, which the ranks do not split yet");
    if (present(gqa::kAttentionBias)) {
      const TypeInfo& t = g_.values[node.inputs[gqa::kAttentionBias]].declared;
      ONYX_CHECK(t.dims.size() == 4 && t.dims[1] == 1, "its attention_bias '",
                 g_.values[node.inputs[gqa::kAttentionBias]].name, "' is not declared [., 1, ., .] (one for every "
                 "head); a per-head bias is not split over ranks yet");
    }
    const bool packed = !(node.inputs.size() > 1 && node.inputs[1] >= 0);
    if (packed) {
      auto [p, add] = product_feeding(node.inputs[0], "packed query");
      const int64_t N = outputs_of(p);
      ONYX_CHECK(N % (H + 2 * Hkv) == 0, "its packed query of ", N, " columns is not ", H, " + 2 x ", Hkv, " heads");
      const int64_t D = N / (H + 2 * Hkv);
      shard_columns(p, {{rank_ * hq * D, (rank_ + 1) * hq * D},
                        {(H + rank_ * hk) * D, (H + (rank_ + 1) * hk) * D},
                        {(H + Hkv + rank_ * hk) * D, (H + Hkv + (rank_ + 1) * hk) * D}},
                    add);
    } else {
      for (int i = 0; i < 3; ++i) {
        auto [p, add] = product_feeding(node.inputs[i], i == 0 ? "query" : i == 1 ? "key" : "value");
        const int64_t heads = i == 0 ? H : Hkv, mine = i == 0 ? hq : hk, N = outputs_of(p);
        ONYX_CHECK(N % heads == 0, "its ", i == 0 ? "query" : i == 1 ? "key" : "value", " of ", N,
                   " columns is not ", heads, " heads");
        const int64_t D = N / heads;
        shard_columns(p, {{rank_ * mine * D, (rank_ + 1) * mine * D}}, add);
      }
    }
    set_int_attr(node, "num_heads", hq);
    set_int_attr(node, "kv_num_heads", hk);
    // The caches (past inputs 3, 4; present outputs 1, 2) hold this rank's KV heads.
    auto cache = [&](int value) {
      if (value < 0) return;
      TypeInfo& t = g_.values[value].declared;
      if (t.dims.size() == 4 && t.dims[1] == Hkv) t.dims[1] = hk;
      else if (!(g_.values[value].is_input || graph_outputs_.count(value))) t = TypeInfo{};
    };
    for (size_t i : {size_t{3}, size_t{4}})
      if (i < node.inputs.size()) cache(node.inputs[i]);
    for (size_t i : {size_t{1}, size_t{2}})
      if (i < node.outputs.size()) cache(node.outputs[i]);
    forget_shape(node.outputs[0]);
    const int o = only_consumer(node.outputs[0]);
    ONYX_CHECK(o >= 0 && is_product(o), "its output is not read by one product by a constant weight (the output "
                                        "projection), which the ranks could split by rows");
    const int64_t K = g_.nodes[o].op_type == "MatMul" ? constant_value(g_, g_.nodes[o].inputs[1])->shape()[0]
                                                        : NodeView(g_.nodes[o]).attr_int("K");
    ONYX_CHECK(K % H == 0, g_.nodes[o].describe(), " reads ", K, " inputs, not ", H, " heads");
    const int64_t D = K / H;
    shard_rows(o, rank_ * hq * D, (rank_ + 1) * hq * D);
    collect(o, "AllReduce", {});
    done_.insert(n);
    ++report_.attention;
  }

  // Mul(silu(g), u) with silu(g) = Mul(g, Sigmoid(g)); g, u products of one input; one product after.
  void gated_mlp(int m) {
    const Node& mul = g_.nodes[m];
    if (mul.inputs.size() != 2) return;
    for (int side = 0; side < 2; ++side) {
      const int act = producer_of(mul.inputs[side]), up = producer_of(mul.inputs[1 - side]);
      if (act < 0 || up < 0 || !is_product(up) || done_.count(up)) continue;
      const Node& a = g_.nodes[act];
      if (a.op_type != "Mul" || !a.domain.empty() || a.inputs.size() != 2) continue;
      int gate = -1;
      for (int j = 0; j < 2; ++j) {
        const int s = producer_of(a.inputs[j]);
        if (s >= 0 && g_.nodes[s].op_type == "Sigmoid" && g_.nodes[s].inputs[0] == a.inputs[1 - j])
          gate = producer_of(a.inputs[1 - j]);
      }
      if (gate < 0 || !is_product(gate) || done_.count(gate)) continue;
      if (g_.nodes[gate].inputs[0] != g_.nodes[up].inputs[0]) continue;
      // The gate's output is read by the SiLU alone (its Sigmoid and Mul): nothing else sees a share.
      bool only_silu = true;
      for (int c : consumers_[g_.nodes[gate].outputs[0]]) only_silu &= c == act || g_.nodes[c].op_type == "Sigmoid";
      if (!only_silu || graph_outputs_.count(g_.nodes[gate].outputs[0])) continue;
      const int down = only_consumer(mul.outputs[0]);
      if (down < 0 || !is_product(down) || done_.count(down) || only_consumer(g_.nodes[up].outputs[0]) != m) continue;
      const int64_t I = outputs_of(gate);
      if (outputs_of(up) != I) continue;
      ONYX_CHECK(I % world_ == 0, "its MLP's ", I, " intermediate features do not split evenly over ", world_,
                 " ranks");
      const int64_t i = I / world_;
      const Ranges mine{{rank_ * i, (rank_ + 1) * i}};
      const int gate_out = g_.nodes[gate].outputs[0];
      shard_columns(gate, mine, -1);
      shard_columns(up, mine, -1);
      for (int c : consumers_[gate_out]) forget_shape(g_.nodes[c].outputs[0]);  // the Sigmoid, the Mul
      forget_shape(mul.outputs[0]);
      shard_rows(down, rank_ * i, (rank_ + 1) * i);
      collect(down, "AllReduce", {});
      done_.insert(m);
      ++report_.mlp;
      return;
    }
  }

  void lm_head(int p, int out) {
    const int64_t V = outputs_of(p);
    if (V % world_ != 0) return;  // stays whole on every rank
    const int64_t v = V / world_;
    shard_columns(p, {{rank_ * v, (rank_ + 1) * v}}, -1);
    collect(p, "AllGather", {make_int_attr("world", world_), make_int_attr("axis", -1)});
    ++report_.lm_head;
  }

  void finish() {
    if (!after_.empty()) {
      std::vector<Node> nodes;
      for (size_t n = 0; n < g_.nodes.size(); ++n) {
        nodes.push_back(std::move(g_.nodes[n]));
        auto it = after_.find(static_cast<int>(n));
        if (it != after_.end())
          for (Node& c : it->second) nodes.push_back(std::move(c));
      }
      g_.nodes = std::move(nodes);
    }
    set_producers(g_);
    drop_unread_initializers(g_, replaced_);
  }

  Graph& g_;
  const int rank_, world_;
  const int64_t comm_;
  std::vector<std::vector<int>> consumers_;
  std::set<int> graph_outputs_;
  std::set<int> done_;  // nodes this pass has split
  std::map<int, std::vector<Node>> after_;
  std::vector<int> replaced_;
  ShardReport report_;
};

}  // namespace

ShardReport shard_tensor_parallel(Graph& g, int rank, int world, int64_t communicator) {
  ONYX_CHECK(world >= 1 && rank >= 0 && rank < world, "tensor parallelism: rank ", rank, " of ", world,
             " is not a rank of the group");
  ShardReport r = Sharder(g, rank, world, communicator).run();
  ONYX_CHECK(r.attention + r.mlp > 0, "tensor parallelism over ", world,
             " rank", world == 1 ? "" : "s", ": the graph has no attention block (com.microsoft GroupQueryAttention) or gated MLP that the "
             "sharding pass knows; it takes decoders as onnxruntime-genai's model builder writes them");
  return r;
}

}  // namespace onyx
