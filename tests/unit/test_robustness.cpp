// Hostile models: sizes that overflow, divisors that are zero, subgraphs that return
// nothing, windows far larger than their input, external data that is not a file of
// the model's folder. Each is an onyx::Error naming the node (or the tensor), never a
// crash, a hang or a wrong answer.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <limits>

#include "model/loader.h"
#include "onnx/onnx.pb.h"
#include "onyx/checked.h"
#include "op_test_util.h"

namespace onyx {

namespace {

// One input of the node under test: fed at run time, or an initializer (known while planning).
struct In {
  Tensor t;
  bool initializer = false;
};
In fed(Tensor t) { return {std::move(t), false}; }
In init(Tensor t) { return {std::move(t), true}; }

// One node 'node_under_test' over these inputs, planned and run (test::run_op).
std::vector<Tensor> run_graph(const std::string& op_type, const std::vector<In>& inputs,
                              std::vector<Attribute> attrs = {}, size_t num_outputs = 1, int opset = 18,
                              const std::string& domain = "") {
  std::vector<Tensor> tensors;
  std::vector<bool> initializers;
  for (const auto& in : inputs) {
    tensors.push_back(in.t);
    initializers.push_back(in.initializer);
  }
  return test::run_op(op_type, tensors, std::move(attrs), num_outputs, opset, domain, initializers);
}

// Runs fn, which must throw an onyx::Error whose text names the node and contains `needle`.
template <class Fn>
void expect_node_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an onyx::Error containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("node_under_test"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

Tensor f32(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(std::move(v), std::move(s)); }
Tensor i64(std::vector<int64_t> v) {
  const int64_t n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<int64_t>(std::move(v), Shape{n});
}

constexpr int64_t k2p62 = int64_t{1} << 62;

}  // namespace

// ---- 1. sizes that overflow ------------------------------------------------

TEST(Robustness, CheckedArithmeticThrowsInsteadOfWrapping) {
  EXPECT_EQ(checked_mul(3, 4), 12);
  EXPECT_THROW(checked_mul(k2p62, 4), Error);
  EXPECT_THROW(checked_add(std::numeric_limits<int64_t>::max(), 1), Error);
  EXPECT_EQ(checked_product({k2p62, k2p62, 0}), 0);  // an empty tensor, however large its other dims
  EXPECT_THROW(checked_product({k2p62, k2p62}), Error);
  EXPECT_EQ(checked_bytes(k2p62 / 4, DType::kFloat32), static_cast<size_t>(k2p62));
  EXPECT_THROW(checked_bytes(k2p62, DType::kFloat32), Error);  // 2^64 bytes: would wrap to 0
  EXPECT_THROW(checked_bytes(k2p62 + 1, DType::kFloat32), Error);  // would wrap to 4
  EXPECT_THROW(checked_align_up(std::numeric_limits<size_t>::max() - 2, 64), Error);
  EXPECT_THROW(Shape({k2p62, 8}).numel(), Error);
}

TEST(Robustness, ExpandWhoseByteSizeWrapsToZeroIsAnError) {
  // float32[2^62]: 2^64 bytes, which wraps to 0 unchecked (no storage, then writes).
  expect_node_error([] { run_graph("Expand", {fed(f32({1}, Shape{1})), init(i64({k2p62}))}); }, "bytes");
}

TEST(Robustness, ExpandWhoseByteSizeWrapsToASmallNumberIsAnError) {
  // float32[2^62 + 1]: 2^64 + 4 bytes, which wraps to 4 unchecked (a wrong, short result).
  expect_node_error([] { run_graph("Expand", {fed(f32({1}, Shape{1})), init(i64({k2p62 + 1}))}); }, "bytes");
  expect_node_error([] { run_graph("Expand", {fed(f32({1, 2}, Shape{2})), init(i64({k2p62, 1, 2}))}); }, "overflows");
}

TEST(Robustness, TileWithHugeRepeatsIsAnError) {
  // 4 * 2^62 elements wraps to 0 unchecked, and the kernel then writes 2^64 elements.
  expect_node_error([] { run_graph("Tile", {fed(f32({1, 2, 3, 4}, Shape{4})), init(i64({k2p62}))}); }, "overflows");
  expect_node_error([] { run_graph("Tile", {fed(f32({1, 2, 3, 4}, Shape{4})), fed(i64({k2p62}))}); }, "overflows");
  // Each axis fits, the element count does not.
  expect_node_error([] { run_graph("Tile", {fed(f32({1, 2, 3, 4}, Shape{2, 2})), init(i64({int64_t{1} << 31, int64_t{1} << 31}))}); },
                    "overflows");
}

TEST(Robustness, PadWhoseAxisOverflowsIsAnError) {
  const int64_t big = std::numeric_limits<int64_t>::max() - 1;
  expect_node_error([&] { run_graph("Pad", {fed(f32({1, 2}, Shape{2})), init(i64({big, big}))}); }, "overflows");
}

TEST(Robustness, ValidLargeShapesStillPlan) {
  // A shape whose other dims are huge but which holds no elements is fine.
  auto out = run_graph("Expand", {fed(f32({}, Shape{0})), init(i64({k2p62, 0}))});
  EXPECT_EQ(out[0].shape(), (Shape{k2p62, 0}));
}

// ---- 2. divisors that are zero -------------------------------------------

TEST(Robustness, DepthToSpaceWhoseBlocksizeSquaredWrapsIsAnError) {
  // 2^32 squared wraps to 0 unchecked, and the channel count is then taken modulo 0.
  const Tensor x = f32({1, 2, 3, 4}, Shape{1, 4, 1, 1});
  expect_node_error([&] { run_graph("DepthToSpace", {fed(x)}, {test::attr_int("blocksize", int64_t{1} << 32)}); },
                    "blocksize");
  expect_node_error([&] { run_graph("SpaceToDepth", {fed(x)}, {test::attr_int("blocksize", int64_t{1} << 32)}); },
                    "blocksize");
  expect_node_error([&] { run_graph("DepthToSpace", {fed(x)}, {test::attr_int("blocksize", 0)}); }, "blocksize");
}

TEST(Robustness, Col2ImWhoseBlockProductWrapsIsAnError) {
  // prod(block_shape) = 2^64 wraps to 0 unchecked: a modulo by zero.
  const int64_t b = int64_t{1} << 32;
  expect_node_error([&] { run_graph("Col2Im", {fed(f32({1}, Shape{1, 1, 1})), init(i64({1, 1})), init(i64({b, b}))}); },
                    "block_shape");
  expect_node_error([&] { run_graph("Col2Im", {fed(f32({1}, Shape{1, 1, 1})), fed(i64({1, 1})), fed(i64({b, b}))}); },
                    "block_shape");
}

TEST(Robustness, MsRotaryEmbeddingWithAZeroWidthCacheIsAnError) {
  // A [max_pos, 0] cache and no num_heads leave nothing to divide the hidden size by.
  const Tensor x = f32({1, 2, 3, 4}, Shape{1, 1, 4});
  const Tensor pos = Tensor::from_vector<int64_t>({0}, Shape{1});
  const Tensor cache(DType::kFloat32, Shape{2, 0});
  expect_node_error(
      [&] {
        run_graph("RotaryEmbedding", {fed(x), fed(pos), fed(cache), fed(cache)}, {}, 1, 1, "com.microsoft");
      },
      "heads");
  expect_node_error(
      [&] {
        run_graph("RotaryEmbedding", {fed(x), init(pos), init(cache), init(cache)}, {}, 1, 1, "com.microsoft");
      },
      "heads");
}

// ---- 3. subgraphs that return nothing ------------------------------------

namespace {

// A Loop body (iteration, cond, v) -> (Constant(cond_value), Identity(v)).
std::shared_ptr<Graph> loop_body(const Tensor& cond_value) {
  auto g = std::make_shared<Graph>();
  g->name = "body";
  for (const char* name : {"iter", "cond_in", "v_in"}) {
    int id = g->value_id(name);
    g->values[id].is_input = true;
    g->inputs.push_back(id);
  }
  Node c;
  c.name = "cond_const";
  c.op_type = "Constant";
  c.opset = 18;
  c.attributes.push_back(test::attr_tensor("value", cond_value));
  int cond_out = g->value_id("cond_out");
  g->values[cond_out].producer = 0;
  c.outputs = {cond_out};
  g->nodes.push_back(std::move(c));
  Node id;
  id.name = "pass";
  id.op_type = "Identity";
  id.opset = 18;
  id.inputs = {g->value_id("v_in")};
  int v_out = g->value_id("v_out");
  g->values[v_out].producer = 1;
  id.outputs = {v_out};
  g->nodes.push_back(std::move(id));
  g->outputs = {cond_out, v_out};
  return g;
}

Attribute graph_attr(const std::string& name, std::shared_ptr<Graph> g) {
  Attribute a;
  a.name = name;
  a.kind = Attribute::Kind::kGraph;
  a.g = std::move(g);
  return a;
}

}  // namespace

TEST(Robustness, LoopBodyReturningAnEmptyConditionIsAnError) {
  const Tensor m = Tensor::from_vector<int64_t>({3}, Shape{});
  const Tensor cond = Tensor::from_vector<bool>({true}, Shape{});
  const Tensor v = f32({1, 2}, Shape{2});
  const Tensor empty(DType::kBool, Shape{0});
  expect_node_error([&] { run_graph("Loop", {fed(m), fed(cond), fed(v)}, {graph_attr("body", loop_body(empty))}); },
                    "condition");
  // A well-formed body still runs.
  auto out = run_graph("Loop", {fed(m), fed(cond), fed(v)},
                       {graph_attr("body", loop_body(Tensor::from_vector<bool>({true}, Shape{})))});
  EXPECT_EQ(out[0].shape(), (Shape{2}));
  EXPECT_EQ(out[0].data<float>()[1], 2.f);
}

// ---- 4. windows far larger than their input --------------------------------

TEST(Robustness, PoolingWithAHugeSameWindowCostsOnlyItsRealTaps) {
  // A 2^31 x 2^31 window with SAME padding on a 4x4 input: every window covers the whole
  // input. Visiting each padded tap would take minutes; the real taps are 16 per window.
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  const Tensor x = f32(v, Shape{1, 1, 4, 4});
  const int64_t k = int64_t{1} << 31;
  const auto start = std::chrono::steady_clock::now();
  auto mx = run_graph("MaxPool", {fed(x)}, {test::attr_ints("kernel_shape", {k, k}), test::attr_string("auto_pad", "SAME_UPPER")});
  auto avg = run_graph("AveragePool", {fed(x)},
                       {test::attr_ints("kernel_shape", {k, k}), test::attr_string("auto_pad", "SAME_LOWER")});
  auto avg_pad = run_graph("AveragePool", {fed(x)},
                           {test::attr_ints("kernel_shape", {k, k}), test::attr_string("auto_pad", "SAME_UPPER"),
                            test::attr_int("count_include_pad", 1)});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  ASSERT_EQ(mx[0].shape(), (Shape{1, 1, 4, 4}));
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(mx[0].data<float>()[i], 15.f);
    EXPECT_FLOAT_EQ(avg[0].data<float>()[i], 7.5f);
    EXPECT_FLOAT_EQ(avg_pad[0].data<float>()[i], static_cast<float>(120.0 / (static_cast<double>(k) * k)));
  }
}

TEST(Robustness, PoolingWindowsStillMatchTheirTaps) {
  // Strides, dilations and explicit pads: the computed tap ranges give the visited ones.
  std::vector<float> v(25);
  for (int i = 0; i < 25; ++i) v[i] = static_cast<float>((i * 7) % 11);
  const Tensor x = f32(v, Shape{1, 1, 5, 5});
  auto out = run_graph("MaxPool", {fed(x)},
                       {test::attr_ints("kernel_shape", {3, 2}), test::attr_ints("strides", {2, 3}),
                        test::attr_ints("dilations", {2, 1}), test::attr_ints("pads", {2, 1, 1, 1})});
  // Reference: visit every tap.
  const int64_t oh = (5 + 3 - 5) / 2 + 1, ow = (5 + 2 - 2) / 3 + 1;
  ASSERT_EQ(out[0].shape(), (Shape{1, 1, oh, ow}));
  for (int64_t i = 0; i < oh; ++i)
    for (int64_t j = 0; j < ow; ++j) {
      float best = -1e30f;
      for (int64_t a = 0; a < 3; ++a)
        for (int64_t b = 0; b < 2; ++b) {
          int64_t r = i * 2 - 2 + a * 2, c = j * 3 - 1 + b;
          if (r >= 0 && r < 5 && c >= 0 && c < 5) best = std::max(best, v[r * 5 + c]);
        }
      EXPECT_EQ(out[0].data<float>()[i * ow + j], best) << i << "," << j;
    }
}

TEST(Robustness, PoolingWindowArithmeticThatOverflowsIsAnError) {
  const Tensor x = f32({1, 2, 3, 4}, Shape{1, 1, 2, 2});
  const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;  // twice it does not fit
  expect_node_error([&] { run_graph("MaxPool", {fed(x)}, {test::attr_ints("kernel_shape", {3, 3}), test::attr_ints("dilations", {big, big})}); },
                    "overflows");
}

// ---- 5. external data that is not a file of the model's folder -------------

namespace {

namespace fs = std::filesystem;

// A fresh folder under the test's temporary directory.
fs::path scratch(const std::string& name) {
  fs::path p = fs::temp_directory_path() / cat("onyx_robustness_", ::getpid(), "_", name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

// Writes dir/model.onnx: y = Identity(W), W float32[4] stored externally at `location`.
fs::path write_external_model(const fs::path& dir, const std::string& location, int64_t offset = 0) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(18);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("external");
  onnx::TensorProto* w = g->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value(location);
  if (offset) {
    auto* off = w->add_external_data();
    off->set_key("offset");
    off->set_value(std::to_string(offset));
  }
  onnx::NodeProto* n = g->add_node();
  n->set_name("id");
  n->set_op_type("Identity");
  n->add_input("W");
  n->add_output("y");
  onnx::ValueInfoProto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  const fs::path path = dir / "model.onnx";
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

void write_weights(const fs::path& path) {
  const float w[4] = {1, 2, 3, 4};
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(w), sizeof w);
}

// Runs fn, which must throw an onyx::Error whose text names W and contains `needle`.
template <class Fn>
void expect_load_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected an onyx::Error containing '" << needle << "'";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'W'"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

}  // namespace

TEST(Robustness, ExternalDataInTheModelFolderLoads) {
  const fs::path dir = scratch("ok");
  fs::create_directories(dir / "weights");
  write_weights(dir / "weights" / "w.bin");
  fs::create_symlink("weights/w.bin", dir / "link.bin");  // a symlink that stays inside is fine
  for (const char* location : {"weights/w.bin", "link.bin"}) {
    Model m = load_model(write_external_model(dir, location).string());
    const Tensor& w = m.graph->initializers.begin()->second;
    EXPECT_EQ(w.data<float>()[3], 4.f) << location;
  }
  fs::remove_all(dir);
}

TEST(Robustness, ExternalDataThatIsAFifoIsRefusedWithoutBlocking) {
  const fs::path dir = scratch("fifo");
  ASSERT_EQ(::mkfifo((dir / "w.bin").c_str(), 0600), 0);
  const fs::path model = write_external_model(dir, "w.bin");
  auto done = std::async(std::launch::async, [&] {
    expect_load_error([&] { load_model(model.string()); }, "not a regular file");
  });
  ASSERT_EQ(done.wait_for(std::chrono::seconds(20)), std::future_status::ready) << "the loader blocked on a FIFO";
  done.get();
  // The model file itself may not be one either.
  ASSERT_EQ(::mkfifo((dir / "fifo.onnx").c_str(), 0600), 0);
  auto model_done = std::async(std::launch::async, [&] { EXPECT_THROW(load_model((dir / "fifo.onnx").string()), Error); });
  ASSERT_EQ(model_done.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  model_done.get();
  fs::remove_all(dir);
}

TEST(Robustness, ExternalDataSymlinkLeavingTheModelFolderIsRefused) {
  const fs::path root = scratch("symlink");
  fs::create_directories(root / "model");
  fs::create_directories(root / "outside");
  write_weights(root / "outside" / "secret.bin");
  fs::create_symlink(root / "outside" / "secret.bin", root / "model" / "w.bin");
  fs::create_symlink(root / "outside", root / "model" / "dir");
  expect_load_error([&] { load_model(write_external_model(root / "model", "w.bin").string()); }, "outside the model's folder");
  expect_load_error([&] { load_model(write_external_model(root / "model", "dir/secret.bin").string()); },
                    "outside the model's folder");
  expect_load_error([&] { load_model(write_external_model(root / "model", "../outside/secret.bin").string()); },
                    "leaves the model's folder");
  // A folder is not a file.
  fs::create_directories(root / "model" / "sub");
  expect_load_error([&] { load_model(write_external_model(root / "model", "sub").string()); }, "not a regular file");
  fs::remove_all(root);
}

TEST(Robustness, ExternalDataOffsetsAreCheckedBeforeMapping) {
  const fs::path dir = scratch("offset");
  write_weights(dir / "w.bin");
  expect_load_error([&] { load_model(write_external_model(dir, "w.bin", 4).string()); }, "lies outside");
  expect_load_error([&] { load_model(write_external_model(dir, "w.bin", std::numeric_limits<int64_t>::max()).string()); },
                    "lies outside");
  fs::remove_all(dir);
}

}  // namespace onyx
