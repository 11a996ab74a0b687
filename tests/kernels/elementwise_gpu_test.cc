// GPU: the fused elementwise kernels against the CPU reference (tests/support/gpu_model_check),
// over row lengths 1, 3, 17, 768, 1000 and a 3-D shape, sizes 1, 3, 17 (and 1000 for the narrow
// rows), with values stored in f32, f16 and bf16, through the fp16 / bf16 precision configs, and
// in every launch-configuration candidate.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <random>
#include <string>
#include <vector>

#include "compiler/pipeline.h"
#include "compiler/reference/reference_compare.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/gpu_model_check.h"
#include "tests/support/ir_harness.h"
#include "tests/support/temp_dir.h"

namespace kiln::testing {
namespace {

using compiler::Precision;
const std::string kS = "S";

struct Layout {
  const char* name;
  std::vector<Dim> dims;
  std::vector<int64_t> row;  // the trailing dims, for broadcast operands
};

std::vector<Layout> layouts() {
  return {{"Sx1", {kS, int64_t{1}}, {1}},          {"Sx3", {kS, int64_t{3}}, {3}},
          {"Sx17", {kS, int64_t{17}}, {17}},       {"Sx768", {kS, int64_t{768}}, {768}},
          {"Sx1000", {kS, int64_t{1000}}, {1000}}, {"2xSx7", {int64_t{2}, kS, int64_t{7}}, {7}}};
}

// Sizes 1, 3, 17 and 1000; wide rows (768 and up) stop at 17 so that the float64 CPU reference
// of a whole test stays within the test's time limit (1000 is then the row length instead).
std::vector<int64_t> sizes_for(const Layout& l) {
  if (l.name == std::string("Sx768") || l.name == std::string("Sx1000") ||
      l.name == std::string("Sx4096"))
    return {1, 3, 17};
  return {1, 3, 17, 1000};
}

struct Storage {
  const char* name;
  int elem;             // onnx::TensorProto element type of inputs, constants and outputs
  Precision
      tolerance;  // row of tests/README.md's tolerance table whose elementwise tolerance applies
};

std::vector<Storage> storages() {
  return {{"f32", onnx::TensorProto::FLOAT, Precision::kF32},
          {"f16", onnx::TensorProto::FLOAT16, Precision::kF16},
          {"bf16", onnx::TensorProto::BFLOAT16, Precision::kBF16}};
}

// OnnxBuilder attributes hold no strings; Gelu's `approximate` is one. The builder is not const,
// so writing through its proto is well defined.
void last_node_string_attr(OnnxBuilder& b, const std::string& key, const std::string& value) {
  auto& proto = const_cast<onnx::ModelProto&>(b.proto());
  auto* node = proto.mutable_graph()->mutable_node(proto.graph().node_size() - 1);
  auto* a = node->add_attribute();
  a->set_name(key);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(value);
}

// A scalar constant of dtype `elem` (a float initializer cast; the importer folds the Cast).
void scalar(OnnxBuilder& b, const std::string& name, float v, int elem) {
  b.initializer(name + "_f32", {}, {v});
  b.node("Cast", {name + "_f32"}, {name}, {{"to", int64_t{elem}}});
}

// Every float op of the family on inputs in [-1, 1), each result an output of dtype `elem`.
OnnxBuilder float_ops_model(const Layout& l, int elem) {
  OnnxBuilder b("ew_ops", 20);
  b.typed_input("x", elem, l.dims).typed_input("y", elem, l.dims);
  scalar(b, "c15", 1.5f, elem);
  scalar(b, "lo", -0.5f, elem);
  scalar(b, "hi", 0.5f, elem);
  auto out = [&](const std::string& op, const std::vector<std::string>& in) {
    b.node(op, in, {"o_" + op}).typed_output("o_" + op, elem);
  };
  for (const char* op :
       {"Neg", "Abs", "Exp", "Erf", "Tanh", "Sigmoid", "Relu", "Gelu", "Sin", "Cos", "Identity"})
    out(op, {"x"});
  b.node("Gelu", {"x"}, {"o_GeluTanh"}).typed_output("o_GeluTanh", elem);
  last_node_string_attr(b, "approximate", "tanh");
  b.node("Abs", {"x"}, {"ax"}).node("Add", {"ax", "c15"}, {"axp"});  // in [1.5, 2.5)
  for (const char* op : {"Sqrt", "Reciprocal", "Log"}) out(op, {"axp"});
  out("Pow", {"axp", "c15"});
  for (const char* op : {"Add", "Sub", "Mul", "Max", "Min"}) out(op, {"x", "y"});
  out("Div", {"x", "axp"});
  out("Clip", {"x", "lo", "hi"});
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    b.node(op, {"x", "y"}, {std::string("o_") + op})
        .typed_output(std::string("o_") + op, onnx::TensorProto::BOOL);
  b.node("Greater", {"x", "y"}, {"gt"}).node("Not", {"gt"}, {"ngt"});
  out("Where", {"ngt", "x", "y"});
  b.node("Cast", {"x"}, {"o_Cast"}, {{"to", int64_t{onnx::TensorProto::FLOAT}}}).output("o_Cast");
  return b;
}

// Without a GPU the models of this file still go through import, lowering, NVRTC and the CPU
// reference, so a model the pipeline refuses shows up before the GPU run.
::testing::AssertionResult compiles_and_has_reference(const OnnxBuilder& b, Precision p) {
  TempDir tmp;
  const auto path = tmp.path() / "model.onnx";
  b.save(path);
  compiler::CompileRequest req;
  req.model = path;
  req.config.size_dim = "S";
  req.config.max_size = 1024;
  req.config.precision = p;
  req.config.mode = CudaGraphMode::kNone;
  req.cache_root = tmp.path() / "cache";
  auto cm = compiler::compile_unpublished(req);
  if (!cm.ok()) return ::testing::AssertionFailure() << "compile: " << cm.status().to_string();
  auto g = compiler::import_canonical(path, req.config);
  if (!g.ok()) return ::testing::AssertionFailure() << "import: " << g.status().to_string();
  auto ref = compiler::reference_run(*g, 3, random_inputs(*g, 3, 5));
  if (!ref.ok()) return ::testing::AssertionFailure() << "reference: " << ref.status().to_string();
  return ::testing::AssertionSuccess();
}

// Inputs, weights and outputs all stored in one dtype: the only rounding is the final store,
// so the elementwise tolerance of tests/README.md for that dtype applies as is.
TEST(ElementwiseGpu, EveryOpInEveryStorageDtype) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(1234);
  for (const Storage& st : storages())
    for (const Layout& l : layouts()) {
      SCOPED_TRACE(std::string(st.name) + " " + l.name);
      GpuCheck check = gpu_check(Precision::kF32, sizes_for(l));
      check.tol = compiler::tolerance_elementwise(st.tolerance);
      check.tol_set = true;
      EXPECT_TRUE(gpu_model_matches_reference(float_ops_model(l, st.elem), check, rng));
    }
}

// Broadcasting: a weight row, a per-row column, a one-element input, and Expand.
OnnxBuilder broadcast_model(const Layout& l, int elem) {
  OnnxBuilder b("ew_bcast", 20);
  std::vector<Dim> col = l.dims;
  col.back() = int64_t{1};
  std::vector<Dim> one(l.dims.size(), int64_t{1});
  b.typed_input("x", elem, l.dims).typed_input("col", elem, col).typed_input("one", elem, one);
  b.random_initializer("w_f32", l.row, -1.0f, 1.0f, 3)
      .node("Cast", {"w_f32"}, {"w"}, {{"to", int64_t{elem}}});
  b.node("Add", {"x", "w"}, {"xw"})
      .node("Mul", {"xw", "col"}, {"xwc"})
      .node("Sub", {"xwc", "one"}, {"y"})
      .typed_output("y", elem);
  b.node("Shape", {"x"}, {"shape"}).node("Expand", {"col", "shape"}, {"e"}).typed_output("e", elem);
  return b;
}

TEST(ElementwiseGpu, BroadcastOperandsAndExpand) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(99);
  for (const Storage& st : storages())
    for (const Layout& l : layouts()) {
      SCOPED_TRACE(std::string(st.name) + " " + l.name);
      GpuCheck check = gpu_check(Precision::kF32, sizes_for(l));
      check.tol = compiler::tolerance_elementwise(st.tolerance);
      check.tol_set = true;
      EXPECT_TRUE(gpu_model_matches_reference(broadcast_model(l, st.elem), check, rng));
    }
}

// f32 model through the precision configs. Override: with fp16/bf16 the pipeline casts the f32
// inputs and weights to the compute dtype at the graph boundary, a rounding the f32 reference
// does not see and that each op scales by its condition number; so fp16/bf16 use tests/README.md's
// end-to-end tolerance, on ops chosen well conditioned on [-1, 1) (weights in [2, 3) so that
// x + w never cancels).
OnnxBuilder precision_model(const Layout& l) {
  OnnxBuilder b("ew_prec", 20);
  b.input("x", l.dims)
      .random_initializer("w", l.row, 2.0f, 3.0f, 5)
      .initializer("half", {}, {0.5f})
      .initializer("zero", {}, {0.0f});
  b.node("Add", {"x", "w"}, {"a"})
      .node("Mul", {"a", "half"}, {"m"})
      .node("Gelu", {"m"}, {"g"})
      .output("g");
  for (const char* op : {"Exp", "Tanh", "Sigmoid", "Relu", "Gelu"})
    b.node(op, {"x"}, {std::string("p_") + op}).output(std::string("p_") + op);
  b.node("Greater", {"x", "zero"}, {"pos"})
      .node("Neg", {"x"}, {"nx"})
      .node("Where", {"pos", "x", "nx"}, {"absx"})
      .output("absx");
  b.node("Mul", {"x", "x"}, {"sq"}).output("sq");
  return b;
}

TEST(ElementwiseGpu, PrecisionConfigs) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(7);
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16})
    for (const Layout& l : layouts()) {
      SCOPED_TRACE(std::string(compiler::precision_name(p)) + " " + l.name);
      GpuCheck check = gpu_check(p, sizes_for(l));
      if (p != Precision::kF32) {
        check.tol = compiler::tolerance_end_to_end(p);
        check.tol_set = true;
      }
      EXPECT_TRUE(gpu_model_matches_reference(precision_model(l), check, rng));
    }
}

OnnxBuilder int_model(const Layout& l) {
  OnnxBuilder b("ew_int", 20);
  b.typed_input("ids", onnx::TensorProto::INT64, l.dims)
      .typed_input("jd", onnx::TensorProto::INT64, l.dims)
      .int64_initializer("k", {}, {1000003})
      .int64_initializer("two", {}, {2});
  b.node("Add", {"ids", "k"}, {"a"})
      .node("Mul", {"a", "two"}, {"m"})
      .node("Sub", {"m", "jd"}, {"s"})
      .typed_output("s", onnx::TensorProto::INT64);
  b.node("Less", {"ids", "jd"}, {"lt"})
      .node("Equal", {"ids", "jd"}, {"eq"})
      .node("Or", {"lt", "eq"}, {"le"})
      .typed_output("le", onnx::TensorProto::BOOL);
  b.node("Cast", {"ids"}, {"f"}, {{"to", int64_t{onnx::TensorProto::FLOAT}}}).output("f");
  b.node("Cast", {"jd"}, {"i32"}, {{"to", int64_t{onnx::TensorProto::INT32}}})
      .typed_output("i32", onnx::TensorProto::INT32);
  b.node("Where", {"lt", "ids", "jd"}, {"mn"}).typed_output("mn", onnx::TensorProto::INT64);
  return b;
}

TEST(ElementwiseGpu, IntegerAndBoolOpsAreExact) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(3);
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.name);
    const OnnxBuilder b = int_model(l);
    GpuCheck check = gpu_check(Precision::kF32, sizes_for(l));
    check.int_high = 7;
    check.tol = {0.0, 0.0};  // integers: exact
    check.tol_set = true;
    EXPECT_TRUE(gpu_model_matches_reference(b, check, rng));
  }
}

TEST(ElementwiseGpu, AChainIsOneKernel) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(11);
  OnnxBuilder b("ew_chain", 20);
  b.input("x", {kS, int64_t{768}})
      .input("y", {kS, int64_t{768}})
      .random_initializer("w", {768})
      .node("Add", {"x", "w"}, {"a"})
      .node("Mul", {"a", "y"}, {"m"})
      .node("Gelu", {"m"}, {"g"})
      .output("g");
  GpuCheckReport report;
  EXPECT_TRUE(
      gpu_model_matches_reference(b, gpu_check(Precision::kF32, {1, 17, 100}), rng, &report));
  EXPECT_EQ(report.kernel_steps, 1);
  EXPECT_EQ(report.gemm_steps, 0);
}

// Two independent chains: x·y → Tanh reads same-shape inputs (the flat vector path, with a
// scalar tail when the element count is no multiple of the width) and x + w → Gelu a weight row
// (the row vector path when the row is a multiple of the width, else the scalar path).
OnnxBuilder candidate_model(const Layout& l, int elem) {
  OnnxBuilder b("ew_cand", 20);
  b.typed_input("x", elem, l.dims).typed_input("y", elem, l.dims);
  b.random_initializer("w_f32", l.row, -1.0f, 1.0f, 3)
      .node("Cast", {"w_f32"}, {"w"}, {{"to", int64_t{elem}}});
  b.node("Mul", {"x", "y"}, {"xy"}).node("Tanh", {"xy"}, {"flat"}).typed_output("flat", elem);
  b.node("Add", {"x", "w"}, {"xw"}).node("Gelu", {"xw"}, {"row"}).typed_output("row", elem);
  return b;
}

// Every launch-configuration candidate (elementwise_candidates: 5 on the vector paths, 4 on the
// scalar path) against the CPU reference: candidate c of every launch that has one, at every
// compile size (the run sizes). Each model has a vector-path launch, so each run tunes one.
TEST(ElementwiseGpu, EveryLaunchCandidate) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(17);
  const Layout narrow{"Sx17", {kS, int64_t{17}}, {17}}, wide{"Sx768", {kS, int64_t{768}}, {768}},
      ints{"Sx3", {kS, int64_t{3}}, {3}};
  for (int c = 0; c < 5; ++c) {
    auto run = [&](const std::string& what, const OnnxBuilder& b, GpuCheck check) {
      SCOPED_TRACE("candidate " + std::to_string(c) + ": " + what);
      check.candidate = c;
      check.compile_sizes = check.sizes;
      GpuCheckReport report;
      EXPECT_TRUE(gpu_model_matches_reference(b, check, rng, &report));
      EXPECT_GT(report.tuned_launches, 0) << "no launch ran candidate " << c;
    };
    for (const Storage& st : {storages()[0], storages()[1]})
      for (const Layout* l : {&narrow, &wide}) {
        GpuCheck check = gpu_check(Precision::kF32, sizes_for(*l));
        check.tol = compiler::tolerance_elementwise(st.tolerance);
        check.tol_set = true;
        run(std::string(st.name) + " " + l->name, candidate_model(*l, st.elem), check);
      }
    GpuCheck exact = gpu_check(Precision::kF32, sizes_for(ints));  // i64, bool, i32 and f32
    exact.int_high = 7;
    exact.tol = {0.0, 0.0};
    exact.tol_set = true;
    run("int64 Sx3", int_model(ints), exact);
  }
}

TEST(ElementwiseGpu, CandidatesCompileWithoutAGpu) {
  const Layout narrow{"Sx17", {kS, int64_t{17}}, {17}}, wide{"Sx768", {kS, int64_t{768}}, {768}};
  for (int c = 0; c < 5; ++c) {
    SCOPED_TRACE("candidate " + std::to_string(c));
    for (const OnnxBuilder& b : {candidate_model(narrow, onnx::TensorProto::FLOAT16),
                                 candidate_model(wide, onnx::TensorProto::FLOAT)}) {
      compiler::CompileOutcome out;
      EXPECT_TRUE(compiles_with_candidate(b, c, &out));
      EXPECT_GT(out.tuned_launches, 0);
    }
  }
}

TEST(ElementwiseGpu, ModelsCompileWithoutAGpu) {
  for (const Layout& l : layouts()) {
    SCOPED_TRACE(l.name);
    for (const Storage& st : storages()) {
      EXPECT_TRUE(compiles_and_has_reference(float_ops_model(l, st.elem), Precision::kF32));
      EXPECT_TRUE(compiles_and_has_reference(broadcast_model(l, st.elem), Precision::kF32));
    }
    for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16})
      EXPECT_TRUE(compiles_and_has_reference(precision_model(l), p));
    EXPECT_TRUE(compiles_and_has_reference(int_model(l), Precision::kF32));
    EXPECT_TRUE(compiles_and_has_reference(candidate_model(l, onnx::TensorProto::FLOAT16),
                                           Precision::kF32));
  }
}

}  // namespace
}  // namespace kiln::testing
