// The CPU reference interpreter: evaluates an ir::Graph at a given size S in float64.
// It is the oracle every pass, kernel and end-to-end test is checked against.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "cache/status.h"
#include "compiler/ir.h"

namespace kiln::compiler {

struct RefTensor {
  DType dtype = DType::kF32;  // the ONNX dtype the values stand for
  std::vector<int64_t> dims;
  std::vector<double> data;
  int64_t numel() const;
};

// Inputs by graph-input name; returns every graph output by name. Checks input dims against
// the graph's shapes evaluated at `size`.
Result<std::map<std::string, RefTensor>> reference_run(
    const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& inputs);

}  // namespace kiln::compiler
