// ONNX import: the file, opsets and ops, graph structure and names.
#include "compiler/frontend/onnx_import.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/compiler/frontend/onnx_import_builder.h"

namespace kiln::compiler {
namespace {

using namespace import_test;  // NOLINT: the builder and helpers of this test family
using ir::DimExpr;
using ir::Shape;
using kiln::testing::source_root;
namespace fs = std::filesystem;

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
  for (int64_t opset : {13, 17, 23, 24}) {
    ModelBuilder b = tiny();
    b.m.mutable_opset_import(0)->set_version(opset);
    import_ok(b);
  }
  for (int64_t opset : {7, 12, 25}) {
    ModelBuilder b = tiny();
    b.m.mutable_opset_import(0)->set_version(opset);
    expect_error(b, StatusCode::kUnimplemented,
                 {"test.onnx", "opset " + std::to_string(opset), "13 to 24"});
  }
  ModelBuilder ms = tiny();
  auto* mso = ms.m.add_opset_import();
  mso->set_domain("com.microsoft");
  mso->set_version(2);
  expect_error(ms, StatusCode::kUnimplemented, {"com.microsoft opset 2", "kiln reads 1"});
  ModelBuilder none = tiny();
  none.m.clear_opset_import();
  expect_error(none, StatusCode::kInvalidArgument, {"no opset_import for the default ONNX domain"});
  ModelBuilder ir = tiny();
  ir.m.set_ir_version(2);
  expect_error(ir, StatusCode::kUnimplemented, {"ir_version 2"});
}

TEST(OnnxImportOps, AllUnsupportedOpsListedAtOnce) {
  ModelBuilder b = tiny();
  b.node("NonZero", {"y"}, {"z1"}, "n3");
  b.node("Erf", {"y"}, {"z2"}, "fine");
  b.node("Loop", {"z2"}, {"z3"}, "n7");
  auto* ms = b.node("QOrderedAttention", {"z2"}, {"z4"}, "qa");
  ms->set_domain("com.microsoft");
  auto* other = b.node("Frob", {"z2"}, {"z5"}, "custom");
  other->set_domain("example.custom");
  auto* mso = b.m.add_opset_import();
  mso->set_domain("com.microsoft");
  mso->set_version(1);
  expect_error(b, StatusCode::kUnimplemented,
               {"test.onnx: 4 unsupported ops: 'n3' (NonZero, domain 'ai.onnx', opset 17), 'n7' "
                "(Loop, domain 'ai.onnx', opset 17), 'qa' (QOrderedAttention, domain "
                "'com.microsoft', opset 1), 'custom' (Frob, domain 'example.custom', not "
                "imported)"});
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
  expect_error(b, StatusCode::kUnimplemented,
               {"unsupported op: 'branch' (If, domain 'ai.onnx', opset 17, with a subgraph)"});
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
  ModelBuilder m;  // inference: the mask output is all true
  m.input("x", {"n", "4"});
  m.node("Dropout", {"x"}, {"y", "mask"}, "drop");
  m.output("y", {"n", "4"});
  ir::Graph gm = import_ok(m);
  const int mask = gm.find_value("mask");
  ASSERT_GE(mask, 0);
  EXPECT_EQ(gm.values[mask].dtype, DType::kBool);
  EXPECT_EQ(ir::shape_to_string(gm.values[mask].shape), "[S, 4]");
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

TEST(OnnxImportGraph, OpsetsBelow13AreRefused) {
  ModelBuilder b(11);
  b.input("x", {"n", "4"});
  b.node("Softmax", {"x"}, {"y"}, "sm");  // opset 11 Softmax flattens: a different op
  b.output("y", {"n", "4"});
  expect_error(b, StatusCode::kUnimplemented, {"opset 11", "13 to 24"});
}

}  // namespace
}  // namespace kiln::compiler
