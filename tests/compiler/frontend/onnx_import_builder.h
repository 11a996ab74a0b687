// Shared by the ONNX import tests: a ModelProto builder for small test models and helpers
// that import them and check errors. Header-only; each test file includes it once.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "compiler/frontend/onnx_import.h"
#include "onnx/onnx_pb.h"
#include "tests/support/source_root.h"

namespace kiln::compiler::import_test {

namespace fs = std::filesystem;
using ir::DimExpr;
using ir::Shape;

using kiln::testing::source_root;

// A fresh directory, removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    do {
      path_ = fs::temp_directory_path() / ("kiln-import-test-" + std::to_string(rd()));
    } while (!fs::create_directory(path_));
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Builds small ModelProtos. Dims: digits → dim_value, "?" → unnamed, anything else → dim_param.
struct ModelBuilder {
  onnx::ModelProto m;
  onnx::GraphProto* g;

  explicit ModelBuilder(int64_t opset = 17) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    g = m.mutable_graph();
    g->set_name("test");
  }
  static void set_type(onnx::ValueInfoProto* vi, int elem, const std::vector<std::string>& dims) {
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (const auto& d : dims) {
      auto* dim = shape->add_dim();
      if (d == "?") continue;
      if (d.find_first_not_of("-0123456789") == std::string::npos) {
        dim->set_dim_value(std::stoll(d));
      } else {
        dim->set_dim_param(d);
      }
    }
  }
  ModelBuilder& input(const std::string& name, const std::vector<std::string>& dims,
                      int elem = onnx::TensorProto::FLOAT) {
    auto* vi = g->add_input();
    vi->set_name(name);
    set_type(vi, elem, dims);
    return *this;
  }
  ModelBuilder& output(const std::string& name, const std::vector<std::string>& dims = {},
                       int elem = onnx::TensorProto::FLOAT, bool typed = true) {
    auto* vi = g->add_output();
    vi->set_name(name);
    if (typed) set_type(vi, elem, dims);
    return *this;
  }
  onnx::NodeProto* node(const std::string& op, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs, const std::string& name = "") {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    return n;
  }
  static void attr_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  onnx::TensorProto* weight(const std::string& name, const std::vector<int64_t>& dims,
                            const std::vector<float>& values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return t;
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

// x[n, 4] -> MatMul(W[4, 3]) -> Relu -> y[n, 3]
inline ModelBuilder tiny() {
  ModelBuilder b;
  b.input("x", {"n", "4"});
  b.weight("W", {4, 3}, std::vector<float>(12, 0.5f));
  b.node("MatMul", {"x", "W"}, {"h"}, "mm");
  b.node("Relu", {"h"}, {"y"}, "act");
  b.output("y", {"n", "3"});
  return b;
}

inline ImportOptions opts_n() { return ImportOptions{"n", {}}; }

inline Result<ir::Graph> import(const ModelBuilder& b, const ImportOptions& o = opts_n(),
                                const fs::path& base = ".") {
  return onnx_import_bytes(b.bytes(), "test.onnx", base, o);
}

inline ir::Graph import_ok(const ModelBuilder& b, const ImportOptions& o = opts_n(),
                           const fs::path& base = ".") {
  Result<ir::Graph> r = import(b, o, base);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : ir::Graph{};
}

inline void expect_error(const Result<ir::Graph>& r, StatusCode code,
                         const std::vector<std::string>& needles) {
  ASSERT_FALSE(r.ok()) << "expected an error";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const auto& n : needles)
    EXPECT_NE(r.status().message().find(n), std::string::npos)
        << "missing '" << n << "' in: " << r.status().message();
}

inline void expect_error(const ModelBuilder& b, StatusCode code,
                         const std::vector<std::string>& needles, const ImportOptions& o = opts_n(),
                         const fs::path& base = ".") {
  expect_error(import(b, o, base), code, needles);
}

}  // namespace kiln::compiler::import_test
