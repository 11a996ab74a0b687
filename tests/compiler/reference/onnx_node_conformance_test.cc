// ONNX's own node tests (Debian package libonnx-testdata: model.onnx plus test_data_set_N with
// inputs and expected outputs, written by ONNX, not by us) run through kiln's importer and CPU
// reference interpreter. Every test whose ops kiln supports must import and match; tests of ops
// outside kiln's list, or of opsets below 13, are skipped with the reason. Run one op's tests
// with e.g. --gtest_filter='*gather*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "compiler/frontend/onnx_import.h"
#include "compiler/reference/reference_interpreter.h"
#include "onnx/onnx_pb.h"
#include "tests/support/ir_harness.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using compiler::RefTensor;

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";

// Node tests kiln does not run, each with the reason. Everything else either imports and
// matches, or is skipped because an op is not on kiln's list or the opset is below 13.
const std::map<std::string, std::string>& known_exclusions() {
  static const std::map<std::string, std::string> m = {
      {"test_cast_FLOAT_to_STRING", "string tensors are not supported"},
      {"test_cast_STRING_to_FLOAT", "string tensors are not supported"},
      {"test_castlike_FLOAT_to_STRING", "string tensors are not supported"},
      {"test_castlike_STRING_to_FLOAT", "string tensors are not supported"},
      {"test_cast_BFLOAT16_to_FLOAT", "ONNX 1.12 stores its bfloat16 input as uint16 data"},
      {"test_cast_FLOAT_to_BFLOAT16", "ONNX 1.12 stores its bfloat16 output as uint16 data"},
      {"test_castlike_BFLOAT16_to_FLOAT_expanded", "bfloat16 data stored as uint16"},
      {"test_castlike_FLOAT_to_BFLOAT16_expanded", "bfloat16 data stored as uint16"},
      {"test_training_dropout", "training-mode Dropout is random; kiln compiles inference"},
      {"test_training_dropout_default", "training-mode Dropout is random"},
      {"test_training_dropout_default_mask", "training-mode Dropout is random"},
      {"test_training_dropout_mask", "training-mode Dropout is random"},
      {"test_training_dropout_zero_ratio", "training_mode input: kiln compiles inference only"},
      {"test_training_dropout_zero_ratio_mask", "training_mode input: inference only"},
      {"test_tril_zero", "a zero-sized dim: kiln requires every dim >= 1"},
      {"test_triu_zero", "a zero-sized dim: kiln requires every dim >= 1"},
      {"test_split_zero_size_splits", "a zero-sized dim: kiln requires every dim >= 1"},
      {"test_reshape_allowzero_reordered", "a zero-sized dim: kiln requires every dim >= 1"},
  };
  return m;
}

std::vector<std::string> node_test_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kNodeTests, ec))
    if (fs::exists(e.path() / "model.onnx")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Per-test overrides of the absolute tolerance below, each with its reason.
const std::map<std::string, std::pair<double, std::string>>& atol_overrides() {
  static const std::map<std::string, std::pair<double, std::string>> m = {
      {"window_",
       {1e-4,
        "ONNX 1.12's expected windows are off by up to 6e-5: e.g. Hann N=10, "
        "n=2 is stored as 0.3454739, exactly 0.5 - 0.5*cos(0.4*pi) = 0.3454915 "
        "(which the reference computes)"}},
  };
  return m;
}

// Per output dtype: the data were computed by numpy in that dtype, our reference in float64.
void tolerance_for(DType d, double& rtol, double& atol) {
  switch (d) {
    case DType::kF16:
      rtol = 2e-3, atol = 1e-3;  // one half-precision ulp is ~1e-3 relative
      break;
    case DType::kBF16:
      rtol = 1.6e-2, atol = 1e-2;
      break;
    case DType::kF64:
      rtol = 1e-9, atol = 1e-12;
      break;
    default:
      rtol = 1e-5, atol = 1e-5;  // numpy float32 results against float64
  }
}

// Import errors that mean "outside what kiln compiles" rather than a bug: ops off kiln's list,
// opsets below 13, element types other than kiln's (int16, uint16/32/64, strings, sequences).
bool outside_kiln(const std::string& msg) {
  for (const char* s :
       {"unsupported op", "opset", "ir_version", "which kiln does not support", "is not a tensor"})
    if (msg.find(s) != std::string::npos) return true;
  return false;
}

// kiln is ahead-of-time: shape-like inputs (Reshape targets, Slice bounds, axes, repeats...)
// must be known at compile time. ONNX's tests often feed them as graph inputs; this freezes
// every integer graph input of one data set into an initializer so the op itself is tested.
Result<std::string> freeze_int_inputs(const fs::path& model, const fs::path& data) {
  std::ifstream f(model, std::ios::binary);
  onnx::ModelProto m;
  if (!m.ParseFromIstream(&f)) return invalid_argument("cannot parse " + model.string());
  auto* g = m.mutable_graph();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  for (int i = 0; i < g->input_size(); ++i) {
    const auto& vi = g->input(i);
    const int elem = vi.type().tensor_type().elem_type();
    const fs::path pb = data / ("input_" + std::to_string(i) + ".pb");
    if ((elem == onnx::TensorProto::INT64 || elem == onnx::TensorProto::INT32) && fs::exists(pb)) {
      std::ifstream tf(pb, std::ios::binary);
      onnx::TensorProto t;
      if (!t.ParseFromIstream(&tf)) return invalid_argument("cannot parse " + pb.string());
      t.set_name(vi.name());
      *g->add_initializer() = t;
    } else {
      *kept.Add() = vi;
    }
  }
  g->mutable_input()->Swap(&kept);
  std::string bytes;
  m.SerializeToString(&bytes);
  return bytes;
}

class NodeConformance : public ::testing::TestWithParam<std::string> {};

TEST_P(NodeConformance, MatchesOnnxData) {
  const std::string name = GetParam();
  if (auto it = known_exclusions().find(name); it != known_exclusions().end())
    GTEST_SKIP() << it->second;
  const fs::path dir = kNodeTests / name;
  compiler::ImportOptions opts{"", {}};
  Result<ir::Graph> plain = compiler::onnx_import_file(dir / "model.onnx", opts);
  if (!plain.ok() && outside_kiln(plain.status().message()))
    GTEST_SKIP() << plain.status().message();
  int sets = 0;
  for (int k = 0; fs::exists(dir / ("test_data_set_" + std::to_string(k))); ++k) {
    const fs::path data = dir / ("test_data_set_" + std::to_string(k));
    Result<ir::Graph> g = plain;
    if (!g.ok()) {  // shape-like inputs given as data: freeze them (see freeze_int_inputs)
      Result<std::string> frozen = freeze_int_inputs(dir / "model.onnx", data);
      ASSERT_TRUE(frozen.ok()) << frozen.status().message();
      g = compiler::onnx_import_bytes(*frozen, name, dir, opts);
      ASSERT_TRUE(g.ok()) << "import: " << plain.status().message()
                          << "\nwith integer inputs frozen: " << g.status().message();
    }
    std::map<std::string, RefTensor> inputs;
    for (int i = 0; fs::exists(data / ("input_" + std::to_string(i) + ".pb")); ++i) {
      std::string in_name;
      Result<RefTensor> t =
          testing::ref_read_pb(data / ("input_" + std::to_string(i) + ".pb"), &in_name);
      ASSERT_TRUE(t.ok()) << t.status().message();
      if (g->find_value(in_name) >= 0 &&
          std::find(g->inputs.begin(), g->inputs.end(), g->find_value(in_name)) != g->inputs.end())
        inputs[in_name] = std::move(t).value();
    }
    auto out = compiler::reference_run(*g, 1, inputs);
    ASSERT_TRUE(out.ok()) << "set " << k << ": " << out.status().message();
    for (size_t j = 0; j < g->outputs.size(); ++j) {
      const fs::path p = data / ("output_" + std::to_string(j) + ".pb");
      if (!fs::exists(p)) continue;
      Result<RefTensor> want = testing::ref_read_pb(p);
      ASSERT_TRUE(want.ok()) << want.status().message();
      const std::string& out_name = g->values[g->outputs[j]].name;
      double rtol = 0, atol = 0;
      tolerance_for(want->dtype, rtol, atol);
      for (const auto& [part, o] : atol_overrides())
        if (name.find(part) != std::string::npos) atol = std::max(atol, o.first);
      EXPECT_TRUE(
          testing::tensors_close(out->at(out_name), *want, rtol, atol,
                                 "set " + std::to_string(k) + " output '" + out_name + "'"));
    }
    ++sets;
  }
  EXPECT_GT(sets, 0) << "no test_data_set_N in " << dir;
}

GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(NodeConformance);  // IsInstalled says why
INSTANTIATE_TEST_SUITE_P(Onnx, NodeConformance, ::testing::ValuesIn(node_test_names()),
                         [](const auto& info) { return info.param; });

TEST(NodeConformanceData, IsInstalled) {
  ASSERT_TRUE(fs::is_directory(kNodeTests))
      << kNodeTests << " is missing: install Debian's libonnx-testdata (tools/setup.sh does)";
  EXPECT_GT(node_test_names().size(), 500u);
}

}  // namespace
}  // namespace kiln
