#include "tests/support/onnx_builder.h"

#include <fstream>
#include <random>

namespace kiln::testing {

OnnxBuilder::OnnxBuilder(const std::string& name, int64_t opset) {
  model_.set_ir_version(8);
  model_.set_producer_name("kiln-tests");
  auto* op = model_.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  model_.mutable_graph()->set_name(name);
}

OnnxBuilder& OnnxBuilder::input(const std::string& name, const std::vector<Dim>& dims) {
  return typed_input(name, onnx::TensorProto::FLOAT, dims);
}

OnnxBuilder& OnnxBuilder::typed_input(const std::string& name, int elem_type,
                                      const std::vector<Dim>& dims) {
  auto* vi = model_.mutable_graph()->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (const Dim& d : dims) {
    auto* dim = shape->add_dim();
    if (const auto* v = std::get_if<int64_t>(&d)) dim->set_dim_value(*v);
    else dim->set_dim_param(std::get<std::string>(d));
  }
  return *this;
}

OnnxBuilder& OnnxBuilder::output(const std::string& name) {
  return typed_output(name, onnx::TensorProto::FLOAT);
}

OnnxBuilder& OnnxBuilder::typed_output(const std::string& name, int elem_type) {
  auto* vi = model_.mutable_graph()->add_output();
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type);
  return *this;
}

OnnxBuilder& OnnxBuilder::int64_initializer(const std::string& name,
                                            const std::vector<int64_t>& dims,
                                            const std::vector<int64_t>& values) {
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
  return *this;
}

OnnxBuilder& OnnxBuilder::initializer(const std::string& name, const std::vector<int64_t>& dims,
                                      const std::vector<float>& values) {
  auto* t = model_.mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
  return *this;
}

OnnxBuilder& OnnxBuilder::random_initializer(const std::string& name,
                                             const std::vector<int64_t>& dims, float lo, float hi,
                                             uint32_t seed) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return initializer(name, dims, v);
}

OnnxBuilder& OnnxBuilder::node(const std::string& op, const std::vector<std::string>& inputs,
                               const std::vector<std::string>& outputs,
                               const std::vector<std::pair<std::string, Attr>>& attrs) {
  auto* n = model_.mutable_graph()->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(nodes_++));
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  for (const auto& [key, value] : attrs) {
    auto* a = n->add_attribute();
    a->set_name(key);
    if (const auto* i = std::get_if<int64_t>(&value)) {
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(*i);
    } else if (const auto* f = std::get_if<float>(&value)) {
      a->set_type(onnx::AttributeProto::FLOAT);
      a->set_f(*f);
    } else {
      a->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : std::get<std::vector<int64_t>>(value)) a->add_ints(v);
    }
  }
  return *this;
}

std::string OnnxBuilder::bytes() const { return model_.SerializeAsString(); }

void OnnxBuilder::save(const std::filesystem::path& path) const {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes();
}

}  // namespace kiln::testing
