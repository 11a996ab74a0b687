// ONNX's own node tests (onnx/backend/test/data/node, installed by libonnx-testdata): one model
// per test with its inputs and expected outputs, checked against kiln's reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace kiln::testing {

// Where libonnx-testdata installs the node tests.
inline const std::filesystem::path kOnnxNodeTests = "/usr/share/libonnx-testdata/data/node";

// How check_onnx_node_test treats a test. The inputs it freezes become initializers holding
// their test data, for what kiln needs at compile time (shapes, axes, indices, repeats).
struct NodeTestOptions {
  double rtol = 0, atol = 0;     // outputs match within atol + rtol·|want| (exactly by default)
  bool freeze_integers = false;  // freeze every int32 / int64 input
  bool freeze_bools = false;     // freeze every bool input
  bool freeze_all = false;       // freeze every input
  std::set<int> freeze_inputs = {};  // freeze these inputs (by position)
  int64_t min_opset = 0;     // raise an older ONNX opset_import to this (unchanged ops only)
  bool check_dtype = false;  // outputs must also have the expected dtype
};

// Loads node test `name` (skipping it when not installed), freezes the inputs `opts` names,
// runs the reference on test_data_set_0's other inputs and compares every output.
void check_onnx_node_test(const std::string& name, const NodeTestOptions& opts = {});

// The installed node tests whose names start with one of `prefixes`, sorted, less the
// "_expanded" variants (the op written out as a function body).
std::vector<std::string> onnx_node_tests(const std::vector<std::string>& prefixes);

// Names parameterised node tests by the node test without its "test_" prefix.
struct NodeTestName {
  template <typename Param>
  std::string operator()(const ::testing::TestParamInfo<Param>& info) const {
    return std::string(info.param).substr(5);
  }
};

}  // namespace kiln::testing
