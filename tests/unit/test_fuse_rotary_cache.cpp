// The rotary-cache fusion (passes/fuse_rotary_cache.h) and its op (ops/rotary_cache.cpp): a
// layer's RotaryHalf(q), RotaryHalf(k), Concat(past_k, k), Concat(past_v, v) before its
// Attention become one RotaryCache that computes what they compute (every float dtype, past
// lengths from 0, batch > 1, head sizes 64 and 128, fewer KV heads than query heads); the
// generator's cache rewrite gives it the index and it writes in place; near misses stay unfused.
#include <gtest/gtest.h>

#include <cmath>

#include "graph_builder.h"
#include "op_test_util.h"
#include "passes/kv_cache.h"
#include "passes/optimize.h"

namespace onyx {

namespace {

using Builder = test::GraphBuilder;

struct Layer {
  DType t = DType::kFloat32;
  int64_t B = 1, Hq = 4, Hkv = 2, S = 1, P = 3, D = 64;
};

// What a layer's graph differs in from the fusable form.
enum class Miss {
  kNone,
  kKeysRead,          // the rotated keys are also a graph output (fused, still made)
  kQRotRead,          // the rotated queries are also a graph output (fused)
  kConcatAxis1,       // the key cache grows along axis 1
  kOtherSin,          // k's rotary reads another sin
  kOtherSplit,        // k's rotary splits elsewhere
  kPastUntyped,       // the pasts' dtype is not stated
  kRankUnknown,       // q's rank is not shown
  kValuesUncached,    // attention reads v itself
  kUnplaceable,       // v is computed from a reader of present_k
};

void declare(Graph& g, int id, DType t, bool rank4 = true) {
  TypeInfo& d = g.values[id].declared;
  d.category = TypeInfo::Category::kTensor;
  d.dtype = t;
  d.rank_known = rank4;
  if (rank4) {
    d.dims.assign(4, -1);
    d.dim_params.assign(4, "");
  }
}

int onyx_node(Builder& b, const char* op, std::vector<int> in, std::vector<Attribute> attrs = {}) {
  const int out = b.node(op, std::move(in), std::move(attrs));
  b.g.nodes.back().domain = "onyx";
  b.g.nodes.back().opset = 1;
  return out;
}

// Inputs q, k, v, cos, sin, past_k, past_v (and ids: [B, S], for the cache rewrite); outputs
// Attention's, present_k, present_v (and what the miss adds).
Graph make_layer(const Layer& l, Miss miss = Miss::kNone) {
  Builder b;
  const int q = b.input("q"), k = b.input("k"), v_in = b.input("v"), cos = b.input("cos"), sin = b.input("sin");
  const int past_k = b.input("past_k"), past_v = b.input("past_v");
  b.input("ids");
  for (int id : {q, k, v_in, past_k, past_v})
    declare(b.g, id, miss == Miss::kPastUntyped && (id == past_k || id == past_v) ? DType::kUndefined : l.t,
            !(miss == Miss::kRankUnknown && id == q));
  const int split = static_cast<int>(l.D / 2);
  const int q_rot = onyx_node(b, "RotaryHalf", {q, cos, sin}, {test::attr_int("split", split)});
  int sin_k = sin;
  if (miss == Miss::kOtherSin) sin_k = b.node("Neg", {sin});
  const int k_rot = onyx_node(b, "RotaryHalf", {k, cos, sin_k},
                              {test::attr_int("split", miss == Miss::kOtherSplit ? split / 2 : split)});
  const int present_k =
      b.node("Concat", {past_k, k_rot}, {test::attr_int("axis", miss == Miss::kConcatAxis1 ? 1 : 2)});
  int v = v_in;
  int extra = -1;
  if (miss == Miss::kUnplaceable) {  // v = v_in + 0 * sum(present_k) read before v's cache
    extra = b.node("ReduceSum", {present_k}, {test::attr_int("keepdims", 1)});
    v = b.node("Add", {v_in, b.node("Mul", {extra, b.init("zero", Tensor::scalar<float>(0.f))})});
  }
  const int present_v = miss == Miss::kValuesUncached ? v : b.node("Concat", {past_v, v}, {test::attr_int("axis", 2)});
  const int out = b.node("Attention", {q_rot, present_k, present_v},
                         {test::attr_float("scale", 1.f / std::sqrt(static_cast<float>(l.D)))});
  b.g.nodes.back().opset = 23;
  b.g.outputs = {out, present_k, present_v};
  if (miss == Miss::kKeysRead) b.g.outputs.push_back(k_rot);
  if (miss == Miss::kQRotRead) b.g.outputs.push_back(q_rot);
  return b.g;
}

Tensor random_of(DType t, Shape s) {
  const Tensor f = test::random_tensor<float>(std::move(s), -2, 2);
  if (t == DType::kFloat32) return f;
  Tensor out(t, f.shape());
  for (int64_t i = 0; i < f.numel(); ++i) {
    if (t == DType::kFloat16) out.data<Float16>()[i] = Float16(f.data<float>()[i]);
    else out.data<BFloat16>()[i] = BFloat16(f.data<float>()[i]);
  }
  return out;
}

// Fresh inputs in graph order (q, k, v, cos, sin, past_k, past_v, ids); `past` positions of cache.
std::vector<Tensor> inputs_for(const Layer& l, int64_t past) {
  return {random_of(l.t, Shape{l.B, l.Hq, l.S, l.D}),
          random_of(l.t, Shape{l.B, l.Hkv, l.S, l.D}),
          random_of(l.t, Shape{l.B, l.Hkv, l.S, l.D}),
          random_of(l.t, Shape{l.B, 1, l.S, l.D}),
          random_of(l.t, Shape{l.B, 1, l.S, l.D}),
          random_of(l.t, Shape{l.B, l.Hkv, past, l.D}),
          random_of(l.t, Shape{l.B, l.Hkv, past, l.D}),
          test::random_tensor<int64_t>(Shape{l.B, l.S}, 0, 9)};
}

std::vector<Tensor> run(Graph& g, const std::vector<Tensor>& in, const std::vector<Tensor>* bound = nullptr) {
  auto alloc = make_cpu_allocator();
  GraphExecutor exec(g, OpRegistry::global(), alloc, SessionOptions{});
  return exec.run(in, nullptr, nullptr, bound);
}

int count(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.nodes) c += n.op_type == op;
  return c;
}

// Every element of `got` against `want`, relative to want's largest magnitude.
void expect_close(const Tensor& want, const Tensor& got, const std::string& what) {
  ASSERT_TRUE(want.shape() == got.shape()) << what << ": " << want.shape().str() << " vs " << got.shape().str();
  ASSERT_EQ(want.dtype(), got.dtype()) << what;
  double scale = 1e-30, err = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    scale = std::max(scale, std::abs(want.get_as_double(i)));
    err = std::max(err, std::abs(want.get_as_double(i) - got.get_as_double(i)));
    ASSERT_TRUE(std::isfinite(got.get_as_double(i))) << what << " element " << i;
  }
  const double tol = want.dtype() == DType::kFloat32 ? 1e-5 : 1e-2;
  EXPECT_LE(err / scale, tol) << what;
}

// The fused graph's outputs against the plain one's on `in` (the indexed form: inputs 5 and 6 the
// caches); then bound to copies of the caches fed, written in place (only the new rows change).
void expect_fused_as_plain(Graph& plain, Graph& fused, const std::vector<Tensor>& in) {
  const auto a = run(plain, in), b = run(fused, in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t o = 0; o < a.size(); ++o) expect_close(a[o], b[o], cat("output ", o));
  std::vector<Tensor> cache{in[5].clone(), in[6].clone()};
  auto in_place = in;
  in_place[5] = cache[0];
  in_place[6] = cache[1];
  const std::vector<Tensor> bound{Tensor(), cache[0], cache[1]};
  const auto c = run(fused, in_place, &bound);
  expect_close(a[0], c[0], "attention, in place");
  expect_close(a[1], cache[0], "key cache, in place");
  expect_close(a[2], cache[1], "value cache, in place");
}

std::string name_of(const Layer& l, int64_t past) {
  return cat(dtype_name(l.t), " B", l.B, " Hq", l.Hq, " Hkv", l.Hkv, " S", l.S, " D", l.D, " past ", past);
}

const std::vector<Layer> kLayers = {
    {DType::kFloat32, 1, 4, 2, 1, 0, 64},  {DType::kFloat32, 3, 4, 2, 1, 0, 128}, {DType::kFloat32, 2, 8, 2, 3, 0, 64},
    {DType::kFloat32, 2, 4, 4, 1, 0, 128},
};

}  // namespace

TEST(FuseRotaryCache, FusedLayerComputesWhatTheUnfusedComputes) {
  for (DType t : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
    for (Layer l : kLayers)
      for (int64_t past : {0, 1, 7}) {
        l.t = t;
        SCOPED_TRACE(name_of(l, past));
        Graph plain = make_layer(l), fused = make_layer(l);
        const RotaryCacheReport r = fuse_rotary_cache(fused);
        EXPECT_EQ(r.fused, 1);
        EXPECT_EQ(r.keys_kept, 0);
        EXPECT_EQ(count(fused, "RotaryCache"), 1);
        EXPECT_EQ(count(fused, "RotaryHalf"), 0);
        EXPECT_EQ(count(fused, "Concat"), 0);
        for (int rep = 0; rep < 2; ++rep) {
          const auto in = inputs_for(l, past);
          const auto a = run(plain, in), b = run(fused, in);
          ASSERT_EQ(a.size(), b.size());
          for (size_t o = 0; o < a.size(); ++o) expect_close(a[o], b[o], cat("output ", o));
          EXPECT_EQ(b[1].shape()[2], past + l.S);
        }
      }
}

TEST(FuseRotaryCache, ValuesReadElsewhereAreStillMade) {
  for (Miss miss : {Miss::kKeysRead, Miss::kQRotRead}) {
    const Layer l{DType::kBFloat16, 2, 4, 2, 1, 5, 64};
    Graph plain = make_layer(l, miss), fused = make_layer(l, miss);
    const RotaryCacheReport r = fuse_rotary_cache(fused);
    EXPECT_EQ(r.fused, 1);
    EXPECT_EQ(r.keys_kept, miss == Miss::kKeysRead ? 1 : 0);
    const auto in = inputs_for(l, 5);
    const auto a = run(plain, in), b = run(fused, in);
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 4u);
    for (size_t o = 0; o < a.size(); ++o) expect_close(a[o], b[o], cat("output ", o));
  }
}

TEST(FuseRotaryCache, NearMissesStayUnfused) {
  for (Miss miss : {Miss::kConcatAxis1, Miss::kOtherSin, Miss::kOtherSplit, Miss::kPastUntyped, Miss::kRankUnknown,
                    Miss::kValuesUncached, Miss::kUnplaceable}) {
    Graph g = make_layer(Layer{}, miss);
    const size_t nodes = g.nodes.size();
    EXPECT_EQ(fuse_rotary_cache(g).fused, 0) << static_cast<int>(miss);
    EXPECT_EQ(g.nodes.size(), nodes) << static_cast<int>(miss);
    EXPECT_EQ(count(g, "RotaryCache"), 0) << static_cast<int>(miss);
  }
  // The unplaceable layer still runs unfused (the graph is not broken by the attempt).
  Graph g = make_layer(Layer{}, Miss::kUnplaceable);
  fuse_rotary_cache(g);
  EXPECT_EQ(run(g, inputs_for(Layer{}, 3)).size(), 3u);
}

TEST(FuseRotaryCache, OnByDefaultOnCudaOnlyAndWhenAsked) {
  Graph cpu = make_layer(Layer{});
  EXPECT_EQ(optimize_graph(cpu, SessionOptions{}, Device::cpu()).rotary_cache.fused, 0);
  Graph cuda = make_layer(Layer{});
  EXPECT_EQ(optimize_graph(cuda, SessionOptions{}, Device::cuda(0)).rotary_cache.fused, 1);
  SessionOptions off;
  off.fuse_rotary_cache = false;
  Graph cuda_off = make_layer(Layer{});
  EXPECT_EQ(optimize_graph(cuda_off, off, Device::cuda(0)).rotary_cache.fused, 0);
  SessionOptions on;
  on.fuse_rotary_cache = true;
  Graph cpu_on = make_layer(Layer{});
  EXPECT_EQ(optimize_graph(cpu_on, on, Device::cpu()).rotary_cache.fused, 1);
}

// The generator's form: the cache rewrite gives the fused node the index; against the unfused
// graph's rewrite (CacheUpdate), with one position for all rows and one per row, and bound to
// its caches, in place.
TEST(FuseRotaryCache, CacheRewriteMakesTheIndexedFormThatWritesInPlace) {
  const std::vector<std::pair<std::string, std::string>> pairs{{"past_k", "Concat2_out"}, {"past_v", "Concat3_out"}};
  for (DType t : {DType::kFloat32, DType::kBFloat16})
    for (int64_t D : {64, 128}) {
      const Layer l{t, 2, 4, 2, 1, 0, D};
      const int64_t capacity = 9;
      Graph plain = make_layer(l), fused = make_layer(l);
      ASSERT_EQ(fuse_rotary_cache(fused).fused, 1);
      // The presents' names in the fused graph are those of the Concats it replaced.
      const CacheRewrite rp = rewrite_concat_cache(plain, pairs, "ids");
      const CacheRewrite rf = rewrite_concat_cache(fused, pairs, "ids");
      ASSERT_TRUE(rp.applied) << rp.why_not;
      ASSERT_TRUE(rf.applied) << rf.why_not;
      EXPECT_EQ(count(plain, "CacheUpdate"), 2);
      EXPECT_EQ(count(fused, "CacheUpdate"), 0);
      for (const auto& n : fused.nodes)
        if (n.op_type == "RotaryCache") {
          EXPECT_EQ(n.inputs.size(), 8u);
        }
      for (const Tensor& index : {Tensor::from_vector<int64_t>({4}, Shape{}),
                                  Tensor::from_vector<int64_t>({8, 2}, Shape{2})}) {
        SCOPED_TRACE(cat(name_of(l, capacity), " index ", index.shape().str()));
        auto in = inputs_for(l, capacity);
        in.push_back(index);
        expect_fused_as_plain(plain, fused, in);
      }
    }
}

// (The generator end to end, static cache kept and tokens equal: tests/parity/test_rotary_cache.py.)

// The rotary-attention fusion on the generator's form: the rewritten layer's RotaryCache (with
// the index) and its Attention become one RotaryCacheAttention that computes what they compute,
// bound in place too; the Concat form (no index) and a q_rot read elsewhere stay as they are.
TEST(FuseRotaryCache, RotaryAttentionFusesTheIndexedFormOnly) {
  const std::vector<std::pair<std::string, std::string>> pairs{{"past_k", "Concat2_out"}, {"past_v", "Concat3_out"}};
  for (DType t : {DType::kFloat32, DType::kBFloat16, DType::kFloat16})
    for (int64_t D : {64, 128}) {
      const Layer l{t, 2, 8, 2, 1, 0, D};
      const int64_t capacity = 11;
      Graph plain = make_layer(l), fused = make_layer(l);
      ASSERT_EQ(fuse_rotary_cache(fused).fused, 1);
      EXPECT_EQ(fuse_rotary_attention(fused), 0) << "the Concat form has no index";
      ASSERT_TRUE(rewrite_concat_cache(plain, pairs, "ids").applied);
      ASSERT_TRUE(rewrite_concat_cache(fused, pairs, "ids").applied);
      ASSERT_EQ(fuse_rotary_attention(fused), 1);
      EXPECT_EQ(count(fused, "RotaryCacheAttention"), 1);
      EXPECT_EQ(count(fused, "RotaryCache"), 0);
      EXPECT_EQ(count(fused, "Attention"), 0);
      for (const auto& n : fused.nodes)
        if (n.op_type == "RotaryCacheAttention") {
          EXPECT_EQ(n.inputs.size(), 8u);
          EXPECT_NE(n.find_attribute("scale"), nullptr);
          EXPECT_NE(n.find_attribute("split"), nullptr);
        }
      for (const Tensor& index : {Tensor::from_vector<int64_t>({6}, Shape{}),
                                  Tensor::from_vector<int64_t>({10, 0}, Shape{2})}) {
        SCOPED_TRACE(cat(name_of(l, capacity), " index ", index.shape().str()));
        auto in = inputs_for(l, capacity);
        in.push_back(index);
        expect_fused_as_plain(plain, fused, in);
      }
    }
  // The rotated queries read elsewhere: RotaryCache and Attention stay.
  Graph g = make_layer(Layer{}, Miss::kQRotRead);
  ASSERT_EQ(fuse_rotary_cache(g).fused, 1);
  ASSERT_TRUE(rewrite_concat_cache(g, pairs, "ids").applied);
  EXPECT_EQ(fuse_rotary_attention(g), 0);
  EXPECT_EQ(count(g, "RotaryCache"), 1);
  // A causal Attention: stays.
  Graph causal = make_layer(Layer{});
  for (auto& n : causal.nodes)
    if (n.op_type == "Attention") n.attributes.push_back(test::attr_int("is_causal", 1));
  ASSERT_EQ(fuse_rotary_cache(causal).fused, 1);
  ASSERT_TRUE(rewrite_concat_cache(causal, pairs, "ids").applied);
  EXPECT_EQ(fuse_rotary_attention(causal), 0);
}

// With a mask: the fused node takes it as its ninth input, and the options decide the fusion.
TEST(FuseRotaryCache, RotaryAttentionCarriesTheMaskAndFollowsTheOptions) {
  const int64_t B = 2, Hq = 4, Hkv = 2, D = 64, C = 9;
  auto make = [&] {
    Builder b;
    std::vector<int> in;
    for (const char* name : {"q", "k", "v", "cos", "sin", "past_k", "past_v", "index", "mask"})
      in.push_back(b.input(name));
    const int rc = onyx_node(b, "RotaryCache", {in[0], in[1], in[2], in[3], in[4], in[5], in[6], in[7]},
                             {test::attr_int("split", D / 2)});
    b.g.nodes.back().outputs = {rc, b.g.value_id("present_k"), b.g.value_id("present_v")};
    const int y = b.node("Attention", {rc, b.g.value_id("present_k"), b.g.value_id("present_v"), in[8]},
                         {test::attr_float("scale", 0.3f)});
    b.g.nodes.back().opset = 23;
    b.g.outputs = {y, b.g.value_id("present_k"), b.g.value_id("present_v")};
    for (size_t i = 0; i < b.g.nodes.size(); ++i)
      for (int o : b.g.nodes[i].outputs) b.g.values[o].producer = static_cast<int>(i);
    return b.g;
  };
  Graph plain = make(), fused = make();
  ASSERT_EQ(fuse_rotary_attention(fused), 1);
  for (const auto& n : fused.nodes)
    if (n.op_type == "RotaryCacheAttention") EXPECT_EQ(n.inputs.size(), 9u);
  Tensor mask(DType::kBool, Shape{B, 1, 1, C});
  for (int64_t i = 0; i < mask.numel(); ++i) mask.data<bool>()[i] = (i * 7) % 3 != 0;
  std::vector<Tensor> in{random_of(DType::kFloat32, Shape{B, Hq, 1, D}),  random_of(DType::kFloat32, Shape{B, Hkv, 1, D}),
                         random_of(DType::kFloat32, Shape{B, Hkv, 1, D}), random_of(DType::kFloat32, Shape{B, 1, 1, D}),
                         random_of(DType::kFloat32, Shape{B, 1, 1, D}),   random_of(DType::kFloat32, Shape{B, Hkv, C, D}),
                         random_of(DType::kFloat32, Shape{B, Hkv, C, D}), Tensor::from_vector<int64_t>({3, 8}, Shape{2}),
                         mask};
  const auto a = run(plain, in), b = run(fused, in);
  ASSERT_EQ(a.size(), b.size());
  for (size_t o = 0; o < a.size(); ++o) expect_close(a[o], b[o], cat("output ", o));
  // optimize_graph: on CUDA by default; off with either option off; on the CPU only when asked.
  auto fuses = [&](SessionOptions o, Device d) {
    Graph g = make();
    return optimize_graph(g, o, d).rotary_attention;
  };
  EXPECT_EQ(fuses(SessionOptions{}, Device::cuda(0)), 1);
  EXPECT_EQ(fuses(SessionOptions{}, Device::cpu()), 0);
  SessionOptions off;
  off.fuse_rotary_attention = false;
  EXPECT_EQ(fuses(off, Device::cuda(0)), 0);
  SessionOptions no_cache;
  no_cache.fuse_rotary_cache = false;
  EXPECT_EQ(fuses(no_cache, Device::cuda(0)), 0);
  SessionOptions on;
  on.fuse_rotary_cache = on.fuse_rotary_attention = true;
  EXPECT_EQ(fuses(on, Device::cpu()), 1);
}

// A RotaryCache whose presents are not both among the pairs is not rewritten (and so neither
// is anything else).
TEST(FuseRotaryCache, CacheRewriteNeedsBothPresents) {
  Graph g = make_layer(Layer{});
  ASSERT_EQ(fuse_rotary_cache(g).fused, 1);
  const CacheRewrite r = rewrite_concat_cache(g, {{"past_k", "Concat2_out"}}, "ids");
  EXPECT_FALSE(r.applied);
  EXPECT_NE(r.why_not.find("only one of them"), std::string::npos) << r.why_not;
}

}  // namespace onyx
