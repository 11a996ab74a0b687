// Every single-op model under tests/models/ops (made by tests/models/make_op_models.py: the
// com.microsoft contrib ops and the opset-23 ops, with onnxruntime 1.30's outputs) through the
// float64 reference, compared with onnxruntime's output_0.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/onnx_import.h"
#include "compiler/onnx_tensor.h"
#include "compiler/reference_interpreter.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

namespace fs = std::filesystem;

// onnxruntime computes in float32, the reference in float64: attention and norms accumulate
// over up to 32 elements, so float32 rounding reaches a few 1e-6 relative.
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

fs::path ops_dir() { return testing::source_root() / "tests/models/ops"; }

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ops_dir(), ec))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A TensorProto file of any dtype (tools/tensor_io.h's tensor_read_pb reads float only; these
// models also take int32/int64 masks and positions).
Result<std::pair<std::string, RefTensor>> read_tensor(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(ss.str())) return invalid_argument(path.string() + ": not a tensor");
  KILN_ASSIGN_OR_RETURN(OnnxConstant c,
                        onnx_tensor_to_constant(proto, proto.name(), path.parent_path()));
  ir::Value v;
  v.name = proto.name();
  v.dtype = c.dtype;
  v.constant = std::move(c.constant);
  KILN_ASSIGN_OR_RETURN(RefTensor t, reference_decode_constant(v));
  return std::make_pair(proto.name(), std::move(t));
}

class OpModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OpModelTest, ReferenceMatchesOnnxruntime) {
  const fs::path dir = ops_dir() / GetParam();
  Result<ir::Graph> g = onnx_import_file(dir / "model.onnx", ImportOptions{"", {}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::map<std::string, RefTensor> inputs;
  for (int i = 0; fs::exists(dir / "test_data_set_0" / fmt::format("input_{}.pb", i)); ++i) {
    auto t = read_tensor(dir / "test_data_set_0" / fmt::format("input_{}.pb", i));
    ASSERT_TRUE(t.ok()) << t.status().message();
    inputs[t->first] = t->second;
  }
  ASSERT_FALSE(inputs.empty());
  auto want = read_tensor(dir / "test_data_set_0/output_0.pb");
  ASSERT_TRUE(want.ok()) << want.status().message();
  auto got = reference_run(*g, 1, inputs);
  ASSERT_TRUE(got.ok()) << got.status().message();
  const std::string out = g->values[g->outputs[0]].name;
  ASSERT_EQ(out, want->first);
  EXPECT_TRUE(testing::tensors_close(got->at(out), want->second, kRtol, kAtol, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Ops, OpModelTest, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(OpModelsTest, AllNineteenModelsArePresent) { EXPECT_EQ(model_names().size(), 19u); }

}  // namespace
}  // namespace kiln::compiler
