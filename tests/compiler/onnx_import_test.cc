#include "compiler/onnx_import.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "onnx/onnx_pb.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

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

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const fs::path& p) {
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
ModelBuilder tiny() {
  ModelBuilder b;
  b.input("x", {"n", "4"});
  b.weight("W", {4, 3}, std::vector<float>(12, 0.5f));
  b.node("MatMul", {"x", "W"}, {"h"}, "mm");
  b.node("Relu", {"h"}, {"y"}, "act");
  b.output("y", {"n", "3"});
  return b;
}

ImportOptions opts_n() { return ImportOptions{"n", {}}; }

Result<ir::Graph> import(const ModelBuilder& b, const ImportOptions& o = opts_n(),
                         const fs::path& base = ".") {
  return onnx_import_bytes(b.bytes(), "test.onnx", base, o);
}

ir::Graph import_ok(const ModelBuilder& b, const ImportOptions& o = opts_n(),
                    const fs::path& base = ".") {
  Result<ir::Graph> r = import(b, o, base);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : ir::Graph{};
}

void expect_error(const Result<ir::Graph>& r, StatusCode code,
                  const std::vector<std::string>& needles) {
  ASSERT_FALSE(r.ok()) << "expected an error";
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const auto& n : needles)
    EXPECT_NE(r.status().message().find(n), std::string::npos)
        << "missing '" << n << "' in: " << r.status().message();
}

void expect_error(const ModelBuilder& b, StatusCode code, const std::vector<std::string>& needles,
                  const ImportOptions& o = opts_n(), const fs::path& base = ".") {
  expect_error(import(b, o, base), code, needles);
}

// ---- the checked-in model --------------------------------------------------------------------

TEST(OnnxImport, MlpSoftmaxModel) {
  Result<ir::Graph> r = onnx_import_file(source_root() / "tests/models/mlp_softmax/model.onnx",
                                         ImportOptions{"batch", {}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const ir::Graph& g = *r;
  EXPECT_TRUE(ir::graph_verify(g).ok());
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.values[g.inputs[0]].name, "x");
  EXPECT_EQ(g.values[g.inputs[0]].shape, (Shape{DimExpr::size(), DimExpr::constant(64)}));
  ASSERT_EQ(g.outputs.size(), 2u);
  EXPECT_EQ(g.values[g.outputs[0]].name, "probs");
  EXPECT_EQ(g.values[g.outputs[1]].name, "logits");
  for (int id : g.outputs) {
    EXPECT_EQ(g.values[id].shape, (Shape{DimExpr::size(), DimExpr::constant(32)}));
    EXPECT_EQ(g.values[id].dtype, DType::kF32);
  }
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(n.op);
  EXPECT_EQ(ops,
            (std::vector<std::string>{"MatMul", "Add", "Relu", "Gemm", "Relu", "Gemm", "Softmax"}));
  int constants = 0;
  for (const auto& v : g.values) constants += v.constant.has_value();
  EXPECT_EQ(constants, 6);
  const std::string text = ir::graph_to_text(g);
  EXPECT_NE(text.find("%W1 = const f32[64,128]\n"), std::string::npos) << text;
  EXPECT_NE(text.find("%h2_pre:f32[S,96] = Gemm(%y1, %W2, %b2) {transB=1}\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("%logits:f32[S,32] = Gemm(%y2, %W3, %b3) {alpha=0.5, beta=1}\n"),
            std::string::npos)
      << text;
}

// ---- the file --------------------------------------------------------------------------------

TEST(OnnxImportFile, Missing) {
  Result<ir::Graph> r = onnx_import_file("/nonexistent/dir/model.onnx", opts_n());
  expect_error(r, StatusCode::kNotFound, {"/nonexistent/dir/model.onnx", "not found"});
}

TEST(OnnxImportFile, Empty) {
  TempDir dir;
  write_file(dir.path() / "model.onnx", "");
  expect_error(onnx_import_file(dir.path() / "model.onnx", opts_n()), StatusCode::kInvalidArgument,
               {"model.onnx", "empty"});
  expect_error(onnx_import_bytes("", "mem.onnx", ".", opts_n()), StatusCode::kInvalidArgument,
               {"mem.onnx", "empty"});
}

TEST(OnnxImportFile, Over2GiBIsRefusedWithoutReading) {
  TempDir dir;
  const fs::path p = dir.path() / "huge.onnx";
  write_file(p, "");
  fs::resize_file(p, (uint64_t{1} << 31) + 1);  // sparse: no disk used
  expect_error(onnx_import_file(p, opts_n()), StatusCode::kInvalidArgument,
               {"huge.onnx", "2147483649 bytes", "2 GiB", "external data"});
}

TEST(OnnxImportFile, RandomBytesAndTruncation) {
  std::mt19937 rng(1234);
  std::string noise(4096, '\0');
  for (char& c : noise) c = static_cast<char>(rng());
  expect_error(onnx_import_bytes(noise, "noise.onnx", ".", opts_n()), StatusCode::kInvalidArgument,
               {"noise.onnx"});
  const std::string model = read_file(source_root() / "tests/models/mlp_softmax/model.onnx");
  ASSERT_GT(model.size(), 1000u);
  for (size_t cut : {model.size() / 2, model.size() - 1}) {
    expect_error(onnx_import_bytes(model.substr(0, cut), "cut.onnx", ".", {"batch", {}}),
                 StatusCode::kInvalidArgument, {"cut.onnx", "not a valid ONNX ModelProto"});
  }
  expect_error(onnx_import_bytes("\x0a\x02", "tiny.onnx", ".", opts_n()),
               StatusCode::kInvalidArgument, {"tiny.onnx", "not a valid ONNX ModelProto"});
}

TEST(OnnxImportFile, DeeplyNestedSubgraphsDoNotOverflow) {
  ModelBuilder b = tiny();
  onnx::GraphProto* inner = b.g;
  for (int depth = 0; depth < 2000; ++depth) {
    auto* n = inner->add_node();
    n->set_op_type("If");
    auto* a = n->add_attribute();
    a->set_name("then_branch");
    a->set_type(onnx::AttributeProto::GRAPH);
    inner = a->mutable_g();
  }
  expect_error(import(b), StatusCode::kInvalidArgument,
               {"test.onnx", "not a valid ONNX ModelProto", "nested"});
}

TEST(OnnxImportFile, NoGraph) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  expect_error(onnx_import_bytes(m.SerializeAsString(), "m.onnx", ".", opts_n()),
               StatusCode::kInvalidArgument, {"m.onnx", "no graph"});
}

// ---- opsets and ops --------------------------------------------------------------------------

TEST(OnnxImportOps, OpsetRange) {
  for (int64_t opset : {7, 13, 23}) {
    ModelBuilder b = tiny();
    b.m.mutable_opset_import(0)->set_version(opset);
    import_ok(b);
  }
  for (int64_t opset : {6, 24}) {
    ModelBuilder b = tiny();
    b.m.mutable_opset_import(0)->set_version(opset);
    expect_error(b, StatusCode::kUnimplemented,
                 {"test.onnx", "opset " + std::to_string(opset), "7 to 23"});
  }
  ModelBuilder none = tiny();
  none.m.clear_opset_import();
  expect_error(none, StatusCode::kInvalidArgument, {"no opset_import for the default ONNX domain"});
  ModelBuilder ir = tiny();
  ir.m.set_ir_version(2);
  expect_error(ir, StatusCode::kUnimplemented, {"ir_version 2"});
}

TEST(OnnxImportOps, AllUnsupportedOpsListedAtOnce) {
  ModelBuilder b = tiny();
  b.node("LayerNormalization", {"y"}, {"z1"}, "n3");
  b.node("Erf", {"z1"}, {"z2"}, "n7");
  b.node("Relu", {"z2"}, {"z3"}, "fine");
  auto* ms = b.node("Attention", {"z3"}, {"z4"}, "mha");
  ms->set_domain("com.microsoft");
  b.m.add_opset_import()->set_domain("com.microsoft");
  expect_error(b, StatusCode::kUnimplemented,
               {"test.onnx: unsupported ops: 'n3' (LayerNormalization), 'n7' (Erf), 'mha' "
                "(com.microsoft.Attention)",
                "only the default ONNX domain is supported; the model uses com.microsoft"});
}

TEST(OnnxImportOps, UnusedOtherDomainImportIsFine) {
  ModelBuilder b = tiny();
  auto* o = b.m.add_opset_import();
  o->set_domain("ai.onnx.ml");
  o->set_version(3);
  import_ok(b);
}

TEST(OnnxImportOps, SubgraphsAreUnsupported) {
  ModelBuilder b = tiny();
  auto* n = b.node("If", {"y"}, {"z"}, "branch");
  auto* a = n->add_attribute();
  a->set_name("then_branch");
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name("inner");
  expect_error(b, StatusCode::kUnimplemented, {"unsupported ops: 'branch' (If, with a subgraph)"});
}

TEST(OnnxImportOps, UnsupportedAttributeType) {
  ModelBuilder b = tiny();
  auto* a = b.g->mutable_node(1)->add_attribute();
  a->set_name("weird");
  a->set_type(onnx::AttributeProto::TENSORS);
  expect_error(b, StatusCode::kUnimplemented, {"node 'act' (Relu)", "'weird'", "TENSORS"});
}

// ---- names and structure ---------------------------------------------------------------------

TEST(OnnxImportGraph, DuplicateProducers) {
  ModelBuilder b = tiny();
  b.node("Relu", {"x"}, {"h"}, "again");
  expect_error(b, StatusCode::kInvalidArgument,
               {"value 'h' is produced twice", "node 'mm' (MatMul)", "node 'again' (Relu)"});
  ModelBuilder c = tiny();
  c.node("Relu", {"h"}, {"x"}, "shadow");
  expect_error(c, StatusCode::kInvalidArgument,
               {"value 'x' is produced twice", "a graph input", "node 'shadow' (Relu)"});
  ModelBuilder d = tiny();
  d.weight("W", {1}, {1.0f});
  expect_error(d, StatusCode::kInvalidArgument, {"initializer 'W' is defined twice"});
  ModelBuilder e = tiny();
  e.input("x", {"n", "4"});
  expect_error(e, StatusCode::kInvalidArgument, {"graph input 'x' is listed twice"});
}

TEST(OnnxImportGraph, InitializerThatIsAlsoAnInputIsAWeight) {
  ModelBuilder b = tiny();
  b.input("W", {"4", "3"});
  ir::Graph g = import_ok(b);
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.values[g.inputs[0]].name, "x");
  EXPECT_TRUE(g.values[g.find_value("W")].constant.has_value());
  ModelBuilder c = tiny();
  c.input("W", {"4", "3"}, onnx::TensorProto::INT64);
  expect_error(c, StatusCode::kInvalidArgument, {"graph input 'W' is declared i64", "f32"});
}

TEST(OnnxImportGraph, DanglingInput) {
  ModelBuilder b = tiny();
  b.g->mutable_node(1)->set_input(0, "nowhere");
  expect_error(b, StatusCode::kInvalidArgument,
               {"node 'act' (Relu): input 'nowhere' is produced by nothing"});
  ModelBuilder c = tiny();
  c.output("ghost");
  expect_error(c, StatusCode::kInvalidArgument, {"graph output 'ghost' is produced by nothing"});
}

TEST(OnnxImportGraph, UnsortedGraphIsSorted) {
  ModelBuilder b;
  b.input("x", {"n", "4"});
  b.node("Sigmoid", {"b"}, {"c"}, "third");
  b.node("Tanh", {"a"}, {"b"}, "second");
  b.node("Relu", {"x"}, {"a"}, "first");
  b.output("c", {"n", "4"});
  ir::Graph g = import_ok(b);
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].name, "first");
  EXPECT_EQ(g.nodes[1].name, "second");
  EXPECT_EQ(g.nodes[2].name, "third");
}

TEST(OnnxImportGraph, CycleNamesANodeOnIt) {
  ModelBuilder b;
  b.input("x", {"n", "4"});
  b.node("Relu", {"x"}, {"r"}, "before");
  b.node("Add", {"r", "b"}, {"a"}, "loop_add");
  b.node("Tanh", {"a"}, {"b"}, "loop_tanh");
  b.node("Sigmoid", {"b"}, {"y"}, "after");
  b.output("y", {"n", "4"});
  Result<ir::Graph> r = import(b);
  expect_error(r, StatusCode::kInvalidArgument, {"the graph has a cycle through node 'loop_"});
  EXPECT_EQ(r.status().message().find("'after'"), std::string::npos) << r.status().message();
}

TEST(OnnxImportGraph, EmptyNodeNamesAreGenerated) {
  ModelBuilder b;
  b.input("x", {"n", "4"});
  b.node("Relu", {"x"}, {"a"});
  b.node("Tanh", {"a"}, {"b"});
  b.node("Sigmoid", {"b"}, {"c"}, "Tanh_1");  // collides with a generated name
  b.output("c", {"n", "4"});
  ir::Graph g = import_ok(b);
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].name, "Relu_0");
  EXPECT_EQ(g.nodes[1].name, "Tanh_1_2");
  EXPECT_EQ(g.nodes[2].name, "Tanh_1");
}

TEST(OnnxImportGraph, IdentityAndDropoutAreKept) {
  ModelBuilder b;
  b.input("x", {"n", "4"});
  b.node("Identity", {"x"}, {"a"}, "id");
  b.node("Dropout", {"a"}, {"b"}, "drop");
  b.node("Dropout", {"b", "", ""}, {"c", ""}, "drop_trailing_empties");
  b.output("c", {"n", "4"});
  ir::Graph g = import_ok(b);
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].op, "Identity");
  EXPECT_EQ(g.nodes[1].op, "Dropout");
  EXPECT_EQ(g.nodes[2].inputs.size(), 1u);
  EXPECT_EQ(g.nodes[2].outputs.size(), 1u);
  ModelBuilder m;
  m.input("x", {"n", "4"});
  m.node("Dropout", {"x"}, {"y", "mask"}, "drop");
  m.output("y", {"n", "4"});
  expect_error(m, StatusCode::kUnimplemented, {"node 'drop' (Dropout)", "mask output 'mask'"});
}

TEST(OnnxImportGraph, ConstantNodesBecomeConstants) {
  ModelBuilder b;
  b.input("x", {"n", "2"});
  auto* c = b.node("Constant", {}, {"k"}, "k_const");
  auto* a = c->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  a->mutable_t()->add_dims(2);
  a->mutable_t()->add_float_data(1.5f);
  a->mutable_t()->add_float_data(-2.0f);
  auto* s = b.node("Constant", {}, {"half"}, "half_const");
  auto* f = s->add_attribute();
  f->set_name("value_float");
  f->set_type(onnx::AttributeProto::FLOAT);
  f->set_f(0.5f);
  b.node("Mul", {"x", "k"}, {"xk"}, "mul");
  b.node("Mul", {"xk", "half"}, {"y"}, "mul2");
  b.output("y", {"n", "2"});
  ir::Graph g = import_ok(b);
  ASSERT_EQ(g.nodes.size(), 2u);
  const ir::Value& k = g.values[g.find_value("k")];
  ASSERT_TRUE(k.constant.has_value());
  EXPECT_EQ(k.shape, Shape{DimExpr::constant(2)});
  float v[2];
  std::memcpy(v, k.constant->bytes.data(), 8);
  EXPECT_EQ(v[0], 1.5f);
  EXPECT_EQ(v[1], -2.0f);
  EXPECT_EQ(g.values[g.find_value("half")].shape, Shape{});
}

TEST(OnnxImportGraph, LegacySoftmax) {
  ModelBuilder b(11);
  b.input("x", {"n", "4"});
  b.node("Softmax", {"x"}, {"y"}, "sm");  // opset 11 default axis 1 == last axis of rank 2
  b.output("y", {"n", "4"});
  ir::Graph g = import_ok(b);
  EXPECT_EQ(g.nodes[0].attr_int("axis", -99), 1);
  ModelBuilder c(11);
  c.input("x", {"n", "3", "4"});
  c.node("Softmax", {"x"}, {"y"}, "sm3");
  c.output("y", {"n", "3", "4"});
  expect_error(c, StatusCode::kUnimplemented, {"node 'sm3' (Softmax)", "opset 11", "last axis"});
}

// ---- dims ------------------------------------------------------------------------------------

TEST(OnnxImportDims, BindsSizeAndDims) {
  ModelBuilder b;
  b.input("x", {"batch", "seq", "4"});
  b.node("Relu", {"x"}, {"y"}, "act");
  b.output("y", {"batch", "seq", "4"});
  ir::Graph g = import_ok(b, ImportOptions{"batch", {{"seq", 16}}});
  EXPECT_EQ(g.values[g.inputs[0]].shape,
            (Shape{DimExpr::size(), DimExpr::constant(16), DimExpr::constant(4)}));
  expect_error(
      b, StatusCode::kInvalidArgument,
      {"graph input 'x' axis 1 has dim_param 'seq'", "size_dim ('batch')", "`dims`", "`size_dim`"},
      ImportOptions{"batch", {}});
  expect_error(b, StatusCode::kInvalidArgument, {"no graph input has the size_dim 'tokens'"},
               ImportOptions{"tokens", {{"batch", 2}, {"seq", 3}}});
}

TEST(OnnxImportDims, BadDimValues) {
  for (const char* bad : {"0", "-3"}) {
    ModelBuilder b;
    b.input("x", {"n", bad});
    b.node("Relu", {"x"}, {"y"}, "act");
    b.output("y");
    expect_error(b, StatusCode::kInvalidArgument,
                 {"graph input 'x' axis 1 has dim_value " + std::string(bad), ">= 1"});
  }
  ModelBuilder u;
  u.input("x", {"n", "?"});
  u.node("Relu", {"x"}, {"y"}, "act");
  u.output("y");
  expect_error(u, StatusCode::kInvalidArgument,
               {"graph input 'x' axis 1 has neither dim_value nor dim_param"});
  ModelBuilder o;
  o.input("x", {"n", "4611686018427387904", "4611686018427387904"});
  o.node("Relu", {"x"}, {"y"}, "act");
  o.output("y");
  expect_error(o, StatusCode::kInvalidArgument, {"graph input 'x'", "overflow int64"});
  ModelBuilder noshape;
  noshape.input("x", {"n"});
  noshape.g->mutable_input(0)->mutable_type()->mutable_tensor_type()->clear_shape();
  noshape.node("Relu", {"x"}, {"y"}, "act");
  noshape.output("y");
  expect_error(noshape, StatusCode::kInvalidArgument, {"graph input 'x' has no shape"});
}

TEST(OnnxImportDims, DeclaredOutputsMustMatch) {
  ModelBuilder b = tiny();
  b.g->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_value(5);
  expect_error(b, StatusCode::kInvalidArgument,
               {"graph output 'y' axis 1 is declared 5 but computes 3", "[S, 3]"});
  ModelBuilder c = tiny();
  c.g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(
      onnx::TensorProto::FLOAT16);
  expect_error(c, StatusCode::kInvalidArgument,
               {"graph output 'y' is declared f16 but computes f32"});
  ModelBuilder d = tiny();
  d.g->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim();
  expect_error(d, StatusCode::kInvalidArgument, {"graph output 'y' is declared with 3 dims"});
  // Names that are neither size_dim nor in dims are exporter noise: accepted.
  ModelBuilder e = tiny();
  e.g->mutable_output(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(1)
      ->set_dim_param("Reluy_dim_1");
  import_ok(e);
  ModelBuilder f;
  f.input("x", {"n", "4"});
  f.node("Relu", {"x"}, {"y"}, "act");
  f.output("y", {"4", "n"});
  expect_error(f, StatusCode::kInvalidArgument,
               {"graph output 'y' axis 0 is declared 4 but computes S"});
}

TEST(OnnxImportDims, HalfPrecisionInputIsNamed) {
  ModelBuilder b;
  b.input("xh", {"n", "4"}, onnx::TensorProto::FLOAT16);
  b.node("Relu", {"xh"}, {"y"}, "act");
  b.output("y", {"n", "4"}, onnx::TensorProto::FLOAT16);
  expect_error(b, StatusCode::kUnimplemented, {"node 'act' (Relu)", "input 'xh' is f16"});
  ModelBuilder s;
  s.input("xs", {"n"}, onnx::TensorProto::STRING);
  s.node("Identity", {"xs"}, {"y"}, "id");
  s.output("y");
  expect_error(s, StatusCode::kUnimplemented, {"graph input 'xs'", "STRING"});
}

// ---- initializers ----------------------------------------------------------------------------

TEST(OnnxImportTensors, TypedAndRawData) {
  ModelBuilder b = tiny();
  b.g->mutable_initializer(0)->clear_float_data();
  std::vector<float> w(12);
  for (int i = 0; i < 12; ++i) w[i] = static_cast<float>(i);
  b.g->mutable_initializer(0)->set_raw_data(std::string(reinterpret_cast<char*>(w.data()), 48));
  ir::Graph g = import_ok(b);
  const auto& bytes = g.values[g.find_value("W")].constant->bytes;
  ASSERT_EQ(bytes.size(), 48u);
  EXPECT_EQ(std::memcmp(bytes.data(), w.data(), 48), 0);
}

TEST(OnnxImportTensors, SizeMismatches) {
  ModelBuilder raw = tiny();
  raw.g->mutable_initializer(0)->clear_float_data();
  raw.g->mutable_initializer(0)->set_raw_data(std::string(40, '\0'));
  expect_error(raw, StatusCode::kDataLoss, {"tensor 'W'", "raw_data has 40 bytes", "needs 48"});
  ModelBuilder typed = tiny();
  typed.g->mutable_initializer(0)->add_float_data(1.0f);
  expect_error(typed, StatusCode::kDataLoss,
               {"tensor 'W'", "float_data has 13 values", "needs 12"});
  ModelBuilder both = tiny();
  both.g->mutable_initializer(0)->set_raw_data(std::string(48, '\0'));
  expect_error(both, StatusCode::kInvalidArgument, {"tensor 'W' has data in both"});
  ModelBuilder wrong = tiny();
  wrong.g->mutable_initializer(0)->clear_float_data();
  for (int i = 0; i < 12; ++i) wrong.g->mutable_initializer(0)->add_int64_data(1);
  expect_error(wrong, StatusCode::kInvalidArgument,
               {"tensor 'W' is f32 but stores its data in int64_data"});
  ModelBuilder none = tiny();
  none.g->mutable_initializer(0)->clear_float_data();
  expect_error(none, StatusCode::kInvalidArgument, {"tensor 'W' has no data"});
}

TEST(OnnxImportTensors, HugeDeclaredShapeTinyData) {
  ModelBuilder b = tiny();
  auto* t = b.g->add_initializer();
  t->set_name("big");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(int64_t{1} << 40);
  t->add_dims(1024);
  t->set_raw_data(std::string(16, '\0'));
  expect_error(b, StatusCode::kDataLoss, {"tensor 'big'", "raw_data has 16 bytes"});
  ModelBuilder o = tiny();
  auto* u = o.g->add_initializer();
  u->set_name("overflow");
  u->set_data_type(onnx::TensorProto::FLOAT);
  u->add_dims(int64_t{1} << 62);
  u->add_dims(int64_t{1} << 62);
  expect_error(o, StatusCode::kInvalidArgument, {"tensor 'overflow'", "overflow int64"});
  ModelBuilder n = tiny();
  n.g->mutable_initializer(0)->set_dims(0, -4);
  expect_error(n, StatusCode::kInvalidArgument, {"tensor 'W' has a negative dim -4"});
  ModelBuilder s = tiny();
  s.g->mutable_initializer(0)->set_data_type(onnx::TensorProto::COMPLEX64);
  expect_error(s, StatusCode::kUnimplemented, {"tensor 'W'", "COMPLEX64"});
}

TEST(OnnxImportTensors, Int32DataRangeIsChecked) {
  ModelBuilder b = tiny();
  auto* t = b.g->add_initializer();
  t->set_name("bytes");
  t->set_data_type(onnx::TensorProto::UINT8);
  t->add_dims(2);
  t->add_int32_data(7);
  t->add_int32_data(300);
  expect_error(b, StatusCode::kInvalidArgument, {"tensor 'bytes'", "int32_data[1] = 300", "u8"});
}

// ---- external data ---------------------------------------------------------------------------

struct ExternalFixture {
  TempDir dir;
  fs::path model_dir;
  std::vector<float> w;
  ExternalFixture() : model_dir(dir.path() / "model") {
    fs::create_directories(model_dir);
    for (int i = 0; i < 12; ++i) w.push_back(0.25f * static_cast<float>(i));
    std::string blob(100, 'x');  // weights at offset 100
    blob.append(reinterpret_cast<const char*>(w.data()), 48);
    write_file(model_dir / "weights.bin", blob);
  }
  // tiny() with W stored externally under `entries`.
  static ModelBuilder model(const std::vector<std::pair<std::string, std::string>>& entries) {
    ModelBuilder b = tiny();
    auto* t = b.g->mutable_initializer(0);
    t->clear_float_data();
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [k, v] : entries) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    }
    return b;
  }
  Result<ir::Graph> run(const std::vector<std::pair<std::string, std::string>>& entries) {
    return import(model(entries), opts_n(), model_dir);
  }
};

TEST(OnnxImportExternal, ReadsTheRightBytes) {
  ExternalFixture f;
  Result<ir::Graph> r =
      f.run({{"location", "weights.bin"}, {"offset", "100"}, {"length", "48"}, {"checksum", "x"}});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& bytes = r->values[r->find_value("W")].constant->bytes;
  ASSERT_EQ(bytes.size(), 48u);
  EXPECT_EQ(std::memcmp(bytes.data(), f.w.data(), 48), 0);
  // Through onnx_import_file: external data resolves next to the model.
  write_file(f.model_dir / "model.onnx",
             ExternalFixture::model({{"location", "weights.bin"}, {"offset", "100"}}).bytes());
  Result<ir::Graph> g = onnx_import_file(f.model_dir / "model.onnx", opts_n());
  EXPECT_TRUE(g.ok()) << g.status().to_string();
}

TEST(OnnxImportExternal, PathEscapes) {
  ExternalFixture f;
  write_file(f.dir.path() / "outside.bin", std::string(148, 'o'));
  expect_error(f.run({{"location", "../outside.bin"}, {"offset", "100"}}),
               StatusCode::kInvalidArgument, {"tensor 'W'", "'../outside.bin'", "'..'"});
  expect_error(f.run({{"location", "sub/../../outside.bin"}}), StatusCode::kInvalidArgument,
               {"'..'"});
  expect_error(f.run({{"location", (f.dir.path() / "outside.bin").string()}}),
               StatusCode::kInvalidArgument, {"tensor 'W'", "is absolute"});
  fs::create_symlink(f.dir.path() / "outside.bin", f.model_dir / "link.bin");
  expect_error(f.run({{"location", "link.bin"}, {"offset", "100"}}), StatusCode::kInvalidArgument,
               {"tensor 'W'", "'link.bin'", "outside the model folder"});
  fs::create_directory_symlink(f.dir.path(), f.model_dir / "up");
  expect_error(f.run({{"location", "up/outside.bin"}, {"offset", "100"}}),
               StatusCode::kInvalidArgument, {"outside the model folder"});
  fs::create_hard_link(f.dir.path() / "outside.bin", f.model_dir / "hard.bin");
  expect_error(f.run({{"location", "hard.bin"}, {"offset", "100"}}), StatusCode::kInvalidArgument,
               {"tensor 'W'", "'hard.bin'", "hard links"});
  // A symlink that stays inside the folder is fine.
  fs::create_symlink("weights.bin", f.model_dir / "alias.bin");
  EXPECT_TRUE(f.run({{"location", "alias.bin"}, {"offset", "100"}}).ok());
}

TEST(OnnxImportExternal, OffsetsAndLengths) {
  ExternalFixture f;
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "-1"}}), StatusCode::kInvalidArgument,
               {"tensor 'W'", "offset '-1' is negative"});
  expect_error(f.run({{"location", "weights.bin"}, {"length", "-48"}}),
               StatusCode::kInvalidArgument, {"length '-48' is negative"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "12abc"}}),
               StatusCode::kInvalidArgument, {"offset '12abc' is not a non-negative integer"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "99999999999999999999"}}),
               StatusCode::kInvalidArgument, {"offset '99999999999999999999'"});
  expect_error(f.run({{"location", "weights.bin"},
                      {"offset", "9999999999999999999"},
                      {"length", "9999999999999999999"}}),
               StatusCode::kDataLoss, {"past the end of 'weights.bin' (148 bytes)"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "120"}}), StatusCode::kDataLoss,
               {"offset 120 + length 48 is past the end of 'weights.bin'"});
  expect_error(f.run({{"location", "weights.bin"}, {"offset", "100"}, {"length", "44"}}),
               StatusCode::kDataLoss, {"length 44", "needs 48 bytes"});
}

TEST(OnnxImportExternal, MissingFileAndBadKeys) {
  ExternalFixture f;
  expect_error(f.run({{"location", "gone.bin"}}), StatusCode::kNotFound,
               {"tensor 'W'", "'gone.bin' not found"});
  expect_error(f.run({{"location", "weights.bin"}, {"compression", "zstd"}}),
               StatusCode::kInvalidArgument,
               {"tensor 'W'", "unknown key 'compression'", "location, offset, length, checksum"});
  expect_error(f.run({{"offset", "0"}}), StatusCode::kInvalidArgument, {"no 'location'"});
  expect_error(f.run({{"location", "weights.bin"}, {"location", "weights.bin"}}),
               StatusCode::kInvalidArgument, {"'location' is given twice"});
}

}  // namespace
}  // namespace kiln::compiler
