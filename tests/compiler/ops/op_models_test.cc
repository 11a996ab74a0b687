// Every single-op model under tests/models/ops (made by tests/models/make_op_models.py: the
// com.microsoft contrib ops and the opset-23 ops, with onnxruntime 1.30's outputs) through the
// float64 reference, compared with onnxruntime's output_0.
#include <gtest/gtest.h>

#include <filesystem>

#include "compiler/frontend/onnx_import.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;
using kiln::testing::model_names;
using kiln::testing::op_models_dir;
using kiln::testing::ref_read_pb;
using kiln::testing::ref_read_pb_inputs;
using kiln::testing::tensors_close;

// onnxruntime computes in float32, the reference in float64: attention and norms accumulate
// over up to 32 elements, so float32 rounding reaches a few 1e-6 relative.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

class OpModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OpModelTest, ReferenceMatchesOnnxruntime) {
  const fs::path dir = op_models_dir() / GetParam();
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", ImportOptions{"", {}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  Result<std::map<std::string, RefTensor>> inputs = ref_read_pb_inputs(dir / "test_data_set_0");
  ASSERT_TRUE(inputs.ok()) << inputs.status().message();
  ASSERT_FALSE(inputs->empty());
  std::string want_name;
  Result<RefTensor> want = ref_read_pb(dir / "test_data_set_0/output_0.pb", &want_name);
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = reference_run(*g, 1, *inputs);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const std::string out = g->values[g->outputs[0]].name;
  ASSERT_EQ(out, want_name);
  EXPECT_TRUE(tensors_close(got->at(out), *want, kRtol, kAtol, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Ops, OpModelTest, ::testing::ValuesIn(model_names(op_models_dir())),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(OpModelsTest, AllNineteenModelsArePresent) {
  EXPECT_EQ(model_names(op_models_dir()).size(), 19u);
}

}  // namespace
}  // namespace kiln::compiler
