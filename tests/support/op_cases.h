// The op cases every back-end path is checked with (test-backend-ops style): one small model per
// case, built in code, each with the tolerance class its numerics call for.
#pragma once

#include <string>
#include <vector>

#include "tests/support/onnx_builder.h"

namespace kiln::testing {

struct OpCase {
  std::string name;
  OnnxBuilder model;
  bool gemm = false;   // GEMM tolerance (with reduction length k) instead of elementwise
  int64_t k = 0;
  int expected_kernels = 0;  // generated kernels the lowering should produce
  int expected_gemms = 0;
};

std::vector<OpCase> op_cases();

}  // namespace kiln::testing
