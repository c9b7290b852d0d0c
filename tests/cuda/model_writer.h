// Writing small ONNX models for the GPU tests: float32 values with fixed or symbolic
// dims, random weights, nodes named "<op>_<output>".
#pragma once

#include <cctype>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "onnx/onnx.pb.h"

namespace onyx::cuda::test {

struct ModelWriter {
  onnx::ModelProto m;
  onnx::GraphProto* g;
  std::mt19937 rng{std::random_device{}()};
  explicit ModelWriter(const std::string& name) {
    m.set_ir_version(9);
    m.add_opset_import()->set_version(18);
    auto* t = m.add_opset_import();
    t->set_domain("onyx.test");
    t->set_version(1);
    g = m.mutable_graph();
    g->set_name(name);
  }
  void value(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& n,
             std::vector<std::string> dims) {
    auto* v = list->Add();
    v->set_name(n);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (auto& d : dims) {
      auto* dim = t->mutable_shape()->add_dim();
      if (std::isdigit(static_cast<unsigned char>(d[0]))) dim->set_dim_value(std::stoll(d));
      else dim->set_dim_param(d);
    }
  }
  void weight(const std::string& n, std::vector<int64_t> dims, float scale) {
    auto* t = g->add_initializer();
    t->set_name(n);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= d;
    }
    std::normal_distribution<float> normal(0.f, scale);
    for (int64_t i = 0; i < count; ++i) t->add_float_data(normal(rng));
  }
  onnx::NodeProto* node(const std::string& op, std::vector<std::string> in, const std::string& out,
                        const std::string& domain = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_domain(domain);
    n->set_name(op + "_" + out);
    for (auto& s : in) n->add_input(s);
    n->add_output(out);
    return n;
  }
  std::string save() {
    std::string path = (std::filesystem::temp_directory_path() / (g->name() + ".onnx")).string();
    std::ofstream f(path, std::ios::binary);
    m.SerializeToOstream(&f);
    return path;
  }
};

}  // namespace onyx::cuda::test
