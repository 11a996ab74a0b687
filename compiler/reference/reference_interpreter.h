// The CPU reference interpreter: evaluates an ir::Graph at a given size S in float64.
// It is the oracle every pass, kernel and end-to-end test is checked against.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct RefTensor {
  DType dtype = DType::kF32;  // the ONNX dtype the values stand for
  std::vector<int64_t> dims;
  std::vector<double> data;
  int64_t numel() const;
};

// The reference refuses tensors larger than this many elements (a size typo, not a model).
inline constexpr int64_t kRefMaxElements = int64_t{1} << 31;

// Dims as in messages: "[2, 3]".
std::string dims_to_string(const std::vector<int64_t>& dims);

// Inputs by graph-input name; returns every graph output by name. Checks input dims against
// the graph's shapes evaluated at `size`. Ops are computed by the registry's reference kernels
// (compiler/ir/op_registry.h).
Result<std::map<std::string, RefTensor>> reference_run(
    const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& inputs);

// Computes the given values (by id) and only what they depend on. Inputs the wanted values do
// not depend on may be left out of `inputs`. Used by passes that classify subgraphs (e.g. masks)
// by evaluating them at a few sizes.
Result<std::map<int, RefTensor>> reference_run_values(
    const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& inputs,
    const std::vector<int>& values);

// A constant value's bytes decoded to float64 (any dtype).
Result<RefTensor> reference_decode_constant(const ir::Value& v);
// The integer contents of `v` known at compile time: a constant's data, or a symbolic constant's
// ints (functions of S); nullopt for run-time data.
std::optional<std::vector<ir::DimExpr>> reference_known_ints(const ir::Value& v);
// The bytes of `t` stored as `dtype` (floats rounded to nearest even, ints truncated, bool 0/1).
Result<std::vector<uint8_t>> reference_encode(const RefTensor& t, DType dtype);
// An f32 constant's bytes stored as `dtype` (f16 or bf16), rounded exactly as
// reference_encode(reference_decode_constant(v), dtype) rounds them, without the float64 copy:
// how precision lowering converts a model's weights (a 554 MB fp32 MLP compiled to fp16 in 10.0 s
// instead of 12.8).
Result<std::vector<uint8_t>> reference_encode_f32_constant(const ir::Value& v, DType dtype);

}  // namespace kiln::compiler
