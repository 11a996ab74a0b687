#include "tests/support/op_test_util.h"

#include <onnx/onnx_pb.h>

#include <filesystem>
#include <regex>

#include "compiler/ir/op_registry.h"
#include "tests/support/ir_harness.h"

namespace kiln::testing {

using compiler::ImportOptions;
using compiler::RefTensor;

ir::DimExpr C(int64_t v) { return ir::DimExpr::constant(v); }

ir::Shape sym_shape(const std::vector<int64_t>& dims) {
  ir::Shape s;
  for (int64_t d : dims) s.push_back(d < 0 ? ir::DimExpr::size() : ir::DimExpr::constant(d));
  return s;
}

RefTensor T(std::vector<int64_t> dims, std::vector<double> data, DType dt) {
  return RefTensor{dt, std::move(dims), std::move(data)};
}

RefTensor iota(std::vector<int64_t> dims) {
  RefTensor t = T(std::move(dims), {});
  t.data.resize(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < t.data.size(); ++i) t.data[i] = static_cast<double>(i);
  return t;
}

ir::Graph import_unfolded(const std::string& text, const std::string& size_dim) {
  ImportOptions opts{size_dim, {}};
  opts.fold = false;
  return import_text_ok(text, opts);
}

std::map<std::string, RefTensor> run(const ir::Graph& g, int64_t s,
                                     const std::map<std::string, RefTensor>& in) {
  Result<std::map<std::string, RefTensor>> r = compiler::reference_run(g, s, in);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::map<std::string, RefTensor>{};
}

void expect_error_status(const Status& st, StatusCode code, const std::vector<std::string>& needles,
                         const std::string& what) {
  ASSERT_FALSE(st.ok()) << what;
  EXPECT_EQ(st.code(), code) << st.to_string();
  for (const auto& n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

void expect_import_error(const std::string& text, StatusCode code,
                         const std::vector<std::string>& needles, const std::string& size_dim) {
  Result<ir::Graph> g = import_text(text, ImportOptions{size_dim, {}});
  expect_error_status(g.ok() ? Status::ok_status() : g.status(), code, needles, text);
}

Result<ir::Graph> import_loose(const std::string& text, const ImportOptions& opts) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, model_bytes_from_text(text));
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) return internal_error("cannot reparse the model");
  for (auto& o : *m.mutable_graph()->mutable_output())
    o.mutable_type()->mutable_tensor_type()->clear_shape();
  m.SerializeToString(&bytes);
  return compiler::onnx_import_bytes(bytes, "test.onnx", std::filesystem::temp_directory_path(),
                                     opts);
}

ImportOptions opts_for(const std::string& text) {
  const bool sized = std::regex_search(text, std::regex(R"([\[,]\s*N\s*[\],])"));
  return ImportOptions{sized ? "N" : "", {}};
}

ir::Graph imp(const std::string& text, bool fold, const std::string& head) {
  ImportOptions opts = opts_for(text);
  opts.fold = fold;
  Result<ir::Graph> g = import_loose(head + text, opts);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? std::move(g).value() : ir::Graph{};
}

const ir::Shape& shape_of(const ir::Graph& g, const std::string& name) {
  static const ir::Shape none;
  const int id = g.find_value(name);
  EXPECT_GE(id, 0) << name;
  return id >= 0 ? g.values[id].shape : none;
}

std::string ints_of(const ir::Graph& g, const std::string& name) {
  const int id = g.find_value(name);
  if (id < 0 || !g.values[id].ints) return "(none)";
  return ir::shape_to_string(*g.values[id].ints);
}

void expect_error(const std::string& text, const std::vector<std::string>& needles,
                  StatusCode code) {
  Result<ir::Graph> g = import_loose(kOpset17Head + text, opts_for(text));
  expect_error_status(g.ok() ? Status::ok_status() : g.status(), code, needles, text);
}

ir::Graph one_node_graph(const std::string& node_name, const std::string& domain,
                         const std::string& op, const std::vector<NodeInput>& ins,
                         std::map<std::string, ir::AttrValue> attrs, int64_t opset) {
  ir::Graph g;
  g.opsets[""] = opset;
  ir::Node n;
  n.name = node_name;
  n.op = op;
  n.domain = domain;
  n.attrs = std::move(attrs);
  for (const NodeInput& in : ins) {
    if (in.name.empty()) {
      n.inputs.push_back(-1);
      continue;
    }
    ir::Value v;
    v.name = in.name;
    v.dtype = in.dtype;
    v.shape = in.shape;
    const int id = g.add_value(std::move(v));
    g.inputs.push_back(id);
    n.inputs.push_back(id);
  }
  ir::Value y;
  y.name = "y";
  y.producer = 0;
  n.outputs.push_back(g.add_value(std::move(y)));
  g.outputs = n.outputs;
  g.nodes.push_back(std::move(n));
  return g;
}

RefTensor run_one_node(const Result<ir::Graph>& g, int64_t s,
                       const std::map<std::string, RefTensor>& in) {
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  if (!g.ok()) return {};
  std::map<std::string, RefTensor> out = run(*g, s, in);
  return out.empty() ? RefTensor{} : out.at("y");
}

std::string ref_error(const std::string& op, const std::vector<const RefTensor*>& in,
                      std::map<std::string, ir::AttrValue> attrs) {
  ir::Node n;
  n.op = op;
  n.attrs = std::move(attrs);
  const compiler::OpDef* def = compiler::op_find("", op);
  if (!def) return "not registered";
  auto r = def->ref(n, in);
  return r.ok() ? "ok" : r.status().message();
}

}  // namespace kiln::testing
