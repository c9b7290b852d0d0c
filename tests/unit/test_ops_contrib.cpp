// The com.microsoft contrib ops without onnxruntime: GroupQueryAttention with present bound to
// past's own storage (the share-buffer contract of onnxruntime-genai and onyx's static KV
// cache), bad inputs giving errors that name the input, and the forms onnxruntime does not run
// (MatMulNBits with 8-bit weights and float zero points) against reference loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "op_test_util.h"
#include "ops/gqa.h"

namespace onyx {

namespace {

using test::attr_int;

// Runs fn and expects an onyx::Error whose message contains every one of `parts`.
template <class Fn>
void expect_error(Fn fn, std::initializer_list<const char*> parts) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning " << *parts.begin();
  } catch (const Error& e) {
    for (const char* p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

Node make_node(const std::string& op, size_t num_inputs, const std::vector<bool>& present, size_t num_outputs,
               std::vector<Attribute> attrs) {
  Node n;
  n.name = "node_under_test";
  n.op_type = op;
  n.domain = "com.microsoft";
  n.opset = 1;
  n.attributes = std::move(attrs);
  for (size_t i = 0; i < num_inputs; ++i) n.inputs.push_back(present[i] ? static_cast<int>(i) : -1);
  for (size_t o = 0; o < num_outputs; ++o) n.outputs.push_back(static_cast<int>(num_inputs + o));
  resolve_op(n, OpRegistry::global());
  return n;
}

// ---- GroupQueryAttention ----

struct GqaCall {
  int64_t B, S, N = 4, kvN = 2, H = 8, past_len;
  std::vector<int32_t> seqlens;
  int32_t total;
  bool rotary = true;
  int64_t window_cache = 0;    // sliding_window_cache=1 with this local_window_size
  std::vector<Tensor> inputs;  // in the op's order; undefined = omitted

  GqaCall(int64_t b, int64_t s, int64_t past, std::vector<int32_t> lens, int32_t tot)
      : B(b), S(s), past_len(past), seqlens(std::move(lens)), total(tot) {
    inputs.resize(9);
    inputs[0] = test::random_tensor<float>(Shape{B, S, N * H});
    inputs[1] = test::random_tensor<float>(Shape{B, S, kvN * H});
    inputs[2] = test::random_tensor<float>(Shape{B, S, kvN * H});
    inputs[3] = test::random_tensor<float>(Shape{B, kvN, past_len, H});
    inputs[4] = test::random_tensor<float>(Shape{B, kvN, past_len, H});
    inputs[5] = Tensor::from_vector<int32_t>(seqlens, Shape{B});
    inputs[6] = Tensor::scalar<int32_t>(total);
    inputs[7] = test::random_tensor<float>(Shape{32, H / 2}, -1, 1);
    inputs[8] = test::random_tensor<float>(Shape{32, H / 2}, -1, 1);
  }
  std::vector<Attribute> attrs() const {
    std::vector<Attribute> a = {attr_int("num_heads", N), attr_int("kv_num_heads", kvN),
                                attr_int("do_rotary", rotary ? 1 : 0)};
    if (window_cache) {
      a.push_back(attr_int("local_window_size", window_cache));
      a.push_back(attr_int("sliding_window_cache", 1));
    }
    return a;
  }
  // Runs the node; with `bind`, present_key/present_value are written into past's tensors.
  std::vector<Tensor> run(bool alias) {
    std::vector<bool> present(inputs.size());
    std::vector<const Tensor*> in;
    for (size_t i = 0; i < inputs.size(); ++i) {
      present[i] = inputs[i].defined();
      in.push_back(present[i] ? &inputs[i] : nullptr);
    }
    Node n = make_node("GroupQueryAttention", inputs.size(), present, 3, attrs());
    OutputBinder bind = [&](size_t o, const ValueType&) { return o == 0 ? Tensor() : inputs[2 + o]; };
    return compute_node(n, in, cpu_allocator(), nullptr, alias ? &bind : nullptr);
  }
};

// A decode step and a prompt into a shared buffer: binding present to past's storage gives the
// bytes of an unaliased run, keeps every past position the step does not write, and writes the
// new entries at each row's own position.
void check_aliasing(GqaCall call) {
  const Tensor past_k = call.inputs[3].clone(), past_v = call.inputs[4].clone();
  call.inputs[3] = past_k.clone();
  call.inputs[4] = past_v.clone();
  const std::vector<Tensor> fresh = call.run(false);
  ASSERT_FALSE(fresh[1].shares_storage_with(call.inputs[3]));
  ASSERT_TRUE(same_bytes(call.inputs[3], past_k)) << "an unaliased run wrote into past_key";

  const std::vector<Tensor> aliased = call.run(true);
  ASSERT_TRUE(aliased[1].shares_storage_with(call.inputs[3]));
  EXPECT_TRUE(same_bytes(aliased[0], fresh[0])) << "output differs when present aliases past";
  EXPECT_TRUE(same_bytes(call.inputs[3], fresh[1])) << "present_key differs when it aliases past_key";
  EXPECT_TRUE(same_bytes(call.inputs[4], fresh[2])) << "present_value differs when it aliases past_value";

  const bool first_prompt = call.S == call.total;
  const int64_t kvN = call.kvN, L = call.past_len, H = call.H;
  for (int64_t b = 0; b < call.B; ++b) {
    const int64_t T = call.seqlens[b] + 1;
    int64_t first_new = first_prompt ? 0 : T - call.S;
    // A window cache's rows [0, held) hold positions [T - held, T): the kept past positions
    // moved to the front (from past row `shift` on), then the new ones.
    int64_t shift = 0;
    if (call.window_cache) {
      const int64_t held = window_cache_held(T, L, call.window_cache);
      const int64_t held_before = window_cache_held(T - call.S, L, call.window_cache);
      first_new = held - call.S;
      shift = held_before - first_new;
    }
    for (int64_t h = 0; h < kvN; ++h)
      for (int64_t p = 0; p < L; ++p) {
        const int64_t at = ((b * kvN + h) * L + p) * H;
        if (p < first_new) {
          const int64_t from = ((b * kvN + h) * L + p + shift) * H;
          EXPECT_EQ(std::memcmp(call.inputs[4].data<float>() + at, past_v.data<float>() + from, H * sizeof(float)), 0)
              << "row " << b << " head " << h << ": kept position at row " << p;
          continue;
        }
        const bool written = p >= first_new && p < first_new + call.S;
        const float* got_v = call.inputs[4].data<float>() + at;
        if (!written) {
          EXPECT_EQ(std::memcmp(got_v, past_v.data<float>() + at, H * sizeof(float)), 0)
              << "row " << b << " head " << h << ": past position " << p << " was overwritten";
        } else {  // values are not rotated: the new entry is value's token (b, p - first_new)
          const float* want = call.inputs[2].data<float>() + ((b * call.S + p - first_new) * kvN + h) * H;
          EXPECT_EQ(std::memcmp(got_v, want, H * sizeof(float)), 0)
              << "row " << b << " head " << h << ": new entry at position " << p;
        }
      }
  }
}

TEST(OpsContrib, GqaDecodeIntoSharedBuffer) { check_aliasing(GqaCall(3, 1, 10, {4, 9, 0}, 10)); }

TEST(OpsContrib, GqaPromptIntoSharedBuffer) { check_aliasing(GqaCall(2, 3, 8, {2, 1}, 3)); }

// A window cache of 8 rows for a window of 5: row 0 (11 tokens) has evicted positions and
// compacted (held = 11 - 4 * 1 = 7), row 1 (4 tokens) still fills it.
TEST(OpsContrib, GqaWindowCacheInSharedBuffer) {
  EXPECT_EQ(window_cache_held(11, 8, 5), 7);
  EXPECT_EQ(window_cache_held(8, 8, 5), 8);
  EXPECT_EQ(window_cache_held(9, 8, 5), 5);
  GqaCall call(2, 1, 8, {10, 3}, 11);
  call.window_cache = 5;
  check_aliasing(call);
}

TEST(OpsContrib, GqaPresentOverlappingPastIsAnError) {
  GqaCall call(1, 1, 6, {3}, 6);
  std::vector<bool> present(9, true);
  std::vector<const Tensor*> in;
  for (const Tensor& t : call.inputs) in.push_back(&t);
  Node n = make_node("GroupQueryAttention", 9, present, 3, call.attrs());
  // present_key starts one position into past_key's bytes.
  OutputBinder bind = [&](size_t o, const ValueType& vt) {
    if (o != 1) return Tensor();
    float* p = call.inputs[3].data<float>() + call.H;
    return Tensor::borrow(DType::kFloat32, vt.shape.to_shape(), p, call.inputs[3].storage());
  };
  expect_error([&] { compute_node(n, in, cpu_allocator(), nullptr, &bind); }, {"present_key", "partially overlaps"});
}

TEST(OpsContrib, GqaBadInputsNameTheInput) {
  auto run = [](GqaCall call) { return call.run(false); };
  {
    GqaCall c(2, 1, 6, {3, 4}, 5);
    c.inputs[1] = test::random_tensor<float>(Shape{2, 1, 12});
    expect_error([&] { run(c); }, {"input 'key'", "[2, 1, 16]"});
  }
  {
    GqaCall c(2, 1, 6, {3, 4}, 5);
    c.inputs[5] = Tensor::from_vector<int64_t>({3, 4}, Shape{2});
    expect_error([&] { run(c); }, {"input 'seqlens_k'", "int32"});
  }
  {
    GqaCall c(2, 1, 6, {3, 7}, 5);  // the present buffer holds max(5, 6) = 6 positions
    expect_error([&] { run(c); }, {"seqlens_k[1] = 7", "out of range"});
  }
  {
    GqaCall c(2, 1, 6, {3, 4}, 5);
    c.inputs[3] = test::random_tensor<float>(Shape{2, 4, 6, 8});
    expect_error([&] { run(c); }, {"input 'past_key'", "BNSH"});
  }
  {
    GqaCall c(2, 1, 6, {3, 4}, 5);
    c.inputs[8] = Tensor();
    expect_error([&] { run(c); }, {"'cos_cache' and 'sin_cache'"});
  }
  {
    GqaCall c(2, 3, 6, {3, 4}, 5);  // a prompt after a past needs batch 1
    expect_error([&] { run(c); }, {"batch size 1"});
  }
  {
    GqaCall c(1, 1, 6, {40}, 41);  // position 40 is outside the 32-row caches
    c.inputs[3] = test::random_tensor<float>(Shape{1, 2, 40, 8});
    c.inputs[4] = test::random_tensor<float>(Shape{1, 2, 40, 8});
    expect_error([&] { run(c); }, {"position 40", "cos_cache"});
  }
  {
    GqaCall c(1, 1, 6, {3}, 6);
    c.inputs.resize(13);
    c.inputs[12] = test::random_tensor<float>(Shape{1});
    expect_error([&] { run(c); }, {"input 'k_scale'", "quantized KV cache"});
  }
  {
    GqaCall c(2, 3, 8, {5, 2}, 8);  // a right-padded chunk of 3: row 1 holds 3 tokens, 4 are claimed
    c.inputs.resize(17);
    c.inputs[16] = Tensor::from_vector<int32_t>({3, 4}, Shape{2});
    expect_error([&] { run(c); }, {"query_seqlens[1] = 4", "min(sequence_length 3"});
    c.inputs[16] = Tensor::from_vector<int64_t>({3, 1}, Shape{2});
    expect_error([&] { run(c); }, {"input 'query_seqlens' must be int32"});
  }
  {
    GqaCall c(1, 1, 6, {3}, 6);
    c.window_cache = 7;  // more than the cache's 6 rows
    expect_error([&] { run(c); }, {"sliding_window_cache=1", "capacity 6", "local_window_size 7"});
  }
  expect_error(
      [&] {
        GqaCall c(1, 1, 6, {3}, 6);
        std::vector<const Tensor*> in;
        for (const Tensor& t : c.inputs) in.push_back(&t);
        Node n = make_node("GroupQueryAttention", 9, std::vector<bool>(9, true), 3, {attr_int("num_heads", 4)});
        compute_node(n, in, cpu_allocator());
      },
      {"kv_num_heads"});
}

// ---- MatMulNBits ----

struct NBitsCase {
  int64_t M, K, N, block, bits;
  Tensor a, b, scales, zp, bias;
  std::vector<double> w;  // dequantized [N, K]
};

// Random quantized weights with float zero points of A's type (scales in [0.01, 0.1]).
NBitsCase nbits_case(int64_t M, int64_t K, int64_t N, int64_t block, int64_t bits) {
  NBitsCase c{M, K, N, block, bits, {}, {}, {}, {}, {}, {}};
  const int64_t kb = (K + block - 1) / block, blob = block * bits / 8;
  c.a = test::random_tensor<float>(Shape{M, K});
  c.b = test::random_tensor<uint8_t>(Shape{N, kb, blob}, 0, 255);
  c.scales = test::random_tensor<float>(Shape{N, kb}, 0.01, 0.1);
  c.zp = test::random_tensor<float>(Shape{N, kb}, 0, (1 << bits) - 1);
  c.bias = test::random_tensor<float>(Shape{N});
  c.w.resize(N * K);
  const uint8_t* pb = c.b.data<uint8_t>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t blk = k / block, i = k % block, per = 8 / bits;
      const int q = (pb[(n * kb + blk) * blob + i / per] >> ((i % per) * bits)) & ((1 << bits) - 1);
      c.w[n * K + k] = (q - c.zp.get_as_double(n * kb + blk)) * c.scales.get_as_double(n * kb + blk);
    }
  return c;
}

std::vector<Attribute> nbits_attrs(const NBitsCase& c) {
  return {attr_int("K", c.K), attr_int("N", c.N), attr_int("block_size", c.block), attr_int("bits", c.bits)};
}

// 8-bit weights with float zero points (onnxruntime's CPU kernel refuses them) and K padded
// inside the last block, against the dequantized product.
TEST(OpsContrib, MatMulNBitsFloatZeroPointsAndPaddedK) {
  for (int64_t bits : {2, 4, 8}) {
    NBitsCase c = nbits_case(3, 40, 5, 16, bits);
    std::vector<Tensor> y = test::compute_op("MatMulNBits", {c.a, c.b, c.scales, c.zp, Tensor(), c.bias},
                                             nbits_attrs(c), 1, 1, "com.microsoft");
    ASSERT_EQ(y[0].shape(), (Shape{3, 5}));
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double want = c.bias.get_as_double(n), magnitude = std::abs(want);
        for (int64_t k = 0; k < c.K; ++k) {
          want += c.a.get_as_double(m * c.K + k) * c.w[n * c.K + k];
          magnitude += std::abs(c.a.get_as_double(m * c.K + k) * c.w[n * c.K + k]);
        }
        // The kernel dequantizes and sums in float32: its error grows with K and with the sum of
        // the terms' magnitudes (which cancel in `want`), at float32's unit roundoff per step.
        const double tol = double(c.K + 4) * 1.2e-7 * magnitude + 1e-7;
        EXPECT_NEAR(y[0].data<float>()[m * c.N + n], want, tol) << "bits " << bits;
      }
  }
}

TEST(OpsContrib, MatMulNBitsOmittedProjectionIsTheBias) {
  NBitsCase c = nbits_case(2, 32, 4, 16, 4);
  Tensor empty(DType::kUInt8, Shape{4, 0, 8});
  std::vector<Tensor> y = test::compute_op("MatMulNBits", {c.a, empty, c.scales, Tensor(), Tensor(), c.bias},
                                           nbits_attrs(c), 1, 1, "com.microsoft");
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t n = 0; n < 4; ++n) EXPECT_EQ(y[0].data<float>()[m * 4 + n], c.bias.data<float>()[n]);
}

TEST(OpsContrib, MatMulNBitsBadInputsNameTheInput) {
  NBitsCase c = nbits_case(2, 40, 4, 16, 4);
  auto run = [&](std::vector<Tensor> in, std::vector<Attribute> attrs) {
    return test::compute_op("MatMulNBits", in, attrs, 1, 1, "com.microsoft");
  };
  expect_error(
      [&] {
        run({c.a, test::random_tensor<uint8_t>(Shape{4, 2, 8}, 0, 255), c.scales}, nbits_attrs(c));
      },
      {"input 'B'", "[4, 3, 8]"});
  expect_error(
      [&] {
        run({test::random_tensor<float>(Shape{2, 41}), c.b, c.scales}, nbits_attrs(c));
      },
      {"input 'A'", "K = 40"});
  expect_error([&] { run({c.a, c.b, test::random_tensor<float>(Shape{4, 2})}, nbits_attrs(c)); }, {"input 'scales'"});
  expect_error(
      [&] {
        run({c.a, c.b, c.scales, test::random_tensor<uint8_t>(Shape{4, 1}, 0, 255)}, nbits_attrs(c));
      },
      {"input 'zero_points'", "[4, 2]"});
  expect_error(
      [&] {
        run({c.a, c.b, c.scales, Tensor(), Tensor(), test::random_tensor<float>(Shape{5})}, nbits_attrs(c));
      },
      {"input 'bias'"});
  std::vector<int32_t> g(40);
  for (int k = 0; k < 40; ++k) g[k] = (k / 16 + 1) % 3;
  expect_error(
      [&] {
        run({c.a, c.b, c.scales, Tensor(), Tensor::from_vector<int32_t>(g, Shape{40})}, nbits_attrs(c));
      },
      {"g_idx[0] = 1", "not support"});
  std::vector<Attribute> bad = nbits_attrs(c);
  bad[2] = attr_int("block_size", 24);
  expect_error([&] { run({c.a, c.b, c.scales}, bad); }, {"block_size", "power of two"});
  bad = nbits_attrs(c);
  bad[3] = attr_int("bits", 3);
  expect_error([&] { run({c.a, c.b, c.scales}, bad); }, {"bits must be 2, 4 or 8"});
}

TEST(OpsContrib, MatMulNBitsIdentityGIdxIsAccepted) {
  NBitsCase c = nbits_case(2, 40, 4, 16, 4);
  std::vector<int32_t> g(40);
  for (int k = 0; k < 40; ++k) g[k] = k / 16;
  Tensor gi = Tensor::from_vector<int32_t>(g, Shape{40});
  auto with = test::compute_op("MatMulNBits", {c.a, c.b, c.scales, c.zp, gi}, nbits_attrs(c), 1, 1, "com.microsoft");
  auto without = test::compute_op("MatMulNBits", {c.a, c.b, c.scales, c.zp}, nbits_attrs(c), 1, 1, "com.microsoft");
  EXPECT_TRUE(same_bytes(with[0], without[0]));
}

// ---- GatherBlockQuantized ----

TEST(OpsContrib, GatherBlockQuantizedOutOfRangeRowsAreZeros) {
  Tensor data = test::random_tensor<uint8_t>(Shape{5, 16}, 0, 255);  // 5 rows of 32 4-bit values
  Tensor scales = test::random_tensor<float>(Shape{5, 2}, 0.01, 0.1);
  Tensor idx = Tensor::from_vector<int64_t>({-1, 5, 2}, Shape{3});
  auto y = test::compute_op("GatherBlockQuantized", {data, idx, scales}, {attr_int("block_size", 16)}, 1, 1,
                            "com.microsoft");
  ASSERT_EQ(y[0].shape(), (Shape{3, 32}));
  for (int64_t c = 0; c < 32; ++c) {
    EXPECT_EQ(y[0].data<float>()[32 + c], 0.f);                                  // index 5 of 5 rows
    const int q = (data.data<uint8_t>()[4 * 16 + c / 2] >> (4 * (c % 2))) & 15;  // index -1: row 4
    EXPECT_FLOAT_EQ(y[0].data<float>()[c], static_cast<float>((q - 8) * scales.get_as_double(4 * 2 + c / 16)));
  }
}

TEST(OpsContrib, GatherBlockQuantizedBadInputsNameTheInput) {
  Tensor data = test::random_tensor<uint8_t>(Shape{5, 16}, 0, 255);
  Tensor idx = Tensor::from_vector<int64_t>({1}, Shape{1});
  auto run = [&](Tensor scales, std::vector<Attribute> attrs, Tensor zp = Tensor()) {
    return test::compute_op("GatherBlockQuantized", {data, idx, scales, zp}, attrs, 1, 1, "com.microsoft");
  };
  Tensor scales = test::random_tensor<float>(Shape{5, 2}, 0.01, 0.1);
  expect_error(
      [&] {
        run(test::random_tensor<float>(Shape{5, 3}), {attr_int("block_size", 16)});
      },
      {"input 'scales'", "[5,2]"});
  expect_error([&] { run(scales, {attr_int("block_size", 16), attr_int("gather_axis", 1)}); }, {"gather_axis"});
  expect_error(
      [&] {
        run(scales, {attr_int("block_size", 16)}, test::random_tensor<uint8_t>(Shape{5, 2}, 0, 255));
      },
      {"input 'zero_points'", "[5,1]"});
  expect_error([&] { run(scales, {attr_int("block_size", 8)}); }, {"block_size"});
}

// ---- MultiHeadAttention ----

TEST(OpsContrib, MultiHeadAttentionRefusesWhatItDoesNotRun) {
  Tensor q = test::random_tensor<float>(Shape{2, 3, 16});
  Tensor k = test::random_tensor<float>(Shape{2, 5, 16});
  std::vector<Attribute> attrs = {attr_int("num_heads", 2)};
  auto run = [&](std::vector<Tensor> in, std::vector<Attribute> a) {
    return test::compute_op("MultiHeadAttention", in, a, 1, 1, "com.microsoft");
  };
  expect_error([&] { run({test::random_tensor<float>(Shape{2, 3, 2, 3, 8})}, attrs); }, {"packed QKV"});
  expect_error([&] { run({q, test::random_tensor<float>(Shape{2, 5, 2, 2, 8}), k}, attrs); }, {"packed KV"});
  expect_error(
      [&] {
        run({q, k, k}, {attr_int("num_heads", 2), attr_int("unidirectional", 1)});
      },
      {"unidirectional", "5 keys for 3 queries"});
  expect_error(
      [&] {
        run({q, k, k, Tensor(), Tensor::from_vector<int32_t>({1, 1, 1, 1, 1, 1, 1, 1}, Shape{8})}, attrs);
      },
      {"input 'key_padding_mask'"});
  expect_error([&] { run({q, k, test::random_tensor<float>(Shape{2, 4, 16})}, attrs); }, {"input 'value'"});
  expect_error([&] { run({q, k, k, test::random_tensor<float>(Shape{47})}, attrs); }, {"input 'bias'", "[48]"});
}

// onyx.genai::CacheUpdate with one write position per batch row (serving: each slot's own
// length), against the same writes done directly.
TEST(OpsGenai, CacheUpdatePerRowIndex) {
  std::mt19937 rng(std::random_device{}());
  std::normal_distribution<float> d;
  const int64_t B = 3, H = 2, C = 9, S = 2, D = 4;
  Tensor cache(DType::kFloat32, Shape{B, H, C, D}), fresh(DType::kFloat32, Shape{B, H, S, D});
  for (float& x : cache.span<float>()) x = d(rng);
  for (float& x : fresh.span<float>()) x = d(rng);
  const std::vector<int64_t> at{0, 7, 3};
  Tensor expected = cache.clone();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t i = 0; i < D; ++i)
          expected.data<float>()[((b * H + h) * C + at[b] + s) * D + i] = fresh.data<float>()[((b * H + h) * S + s) * D + i];
  auto out = test::run_op("CacheUpdate", {cache, fresh, Tensor::from_vector<int64_t>(at, Shape{B})}, {}, 1, 1,
                          "onyx.genai");
  ASSERT_EQ(out[0].shape(), cache.shape());
  for (int64_t i = 0; i < expected.numel(); ++i) ASSERT_EQ(out[0].data<float>()[i], expected.data<float>()[i]) << i;
  // A row whose positions overrun the cache is an error naming the row; so is a count of
  // positions that is neither one nor the batch.
  try {
    test::run_op("CacheUpdate", {cache, fresh, Tensor::from_vector<int64_t>({0, 8, 1}, Shape{B})}, {}, 1, 1,
                 "onyx.genai");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(test::run_op("CacheUpdate", {cache, fresh, Tensor::from_vector<int64_t>({0, 1}, Shape{2})}, {}, 1, 1,
                            "onyx.genai"),
               Error);
}

}  // namespace

}  // namespace onyx
