// Kernel codegen: instantiates the templates in kernels/*.cuh into kernel definitions, and
// assembles one deterministic NVRTC module source from them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/ir.h"
#include "compiler/launch_plan.h"

namespace kiln::compiler {

// The embedded text of kernels/<name> ("softmax.cuh"); empty when there is no such file.
std::string_view embedded_file(std::string_view name);
// The template headers every module may include, as (name, text) pairs.
std::vector<std::pair<std::string, std::string>> kernel_headers();

// One operand of an elementwise op: a kernel input, an earlier op's result, or a constant.
struct EwOperand {
  enum class Kind { kInput, kTemp, kScalar };
  Kind kind = Kind::kInput;
  int index = 0;  // input index or temp (op) index
  float scalar = 0.0f;
  static EwOperand input(int i) { return {Kind::kInput, i, 0.0f}; }
  static EwOperand temp(int i) { return {Kind::kTemp, i, 0.0f}; }
  static EwOperand constant(float v) { return {Kind::kScalar, 0, v}; }
};

// One scalar op from kernels/elementwise.cuh ("add", "relu", ...); its result is temp #i.
struct EwOp {
  std::string fn;
  std::vector<EwOperand> args;
};

// A fused chain of elementwise ops over one output shape. Inputs broadcast to out_shape
// (numpy rules, right-aligned); outputs name the temps that are stored, in order.
struct EwGroup {
  std::vector<ir::Shape> inputs;
  ir::Shape out_shape;
  std::vector<EwOp> ops;
  std::vector<int> outputs;
};

// The elementwise op names ("add", "relu", ...) codegen can emit, by ONNX op_type.
std::string_view ew_function_for_op(std::string_view onnx_op);  // empty when not elementwise
int ew_function_arity(std::string_view fn);                     // 0 when unknown

KernelDef codegen_elementwise(const std::string& symbol, const EwGroup& group);
// Softmax over the last axis of a [rows, cols] view; one warp per row.
KernelDef codegen_softmax(const std::string& symbol, const ir::DimExpr& rows, int64_t cols);
inline constexpr uint32_t kSoftmaxRowsPerBlock = 8;  // 256 threads, a warp per row

// C++ expression for a dim in terms of `S`, e.g. "(2LL*S+1LL)" or "128LL".
std::string dim_code(const ir::DimExpr& d);

// The full module: header comment, includes, then for every kernel a general entry point and
// one specialised entry point per size in `specialise_sizes` (symbol "<symbol>_s<size>").
std::string codegen_module_source(const std::vector<KernelDef>& kernels,
                                  const std::vector<int64_t>& specialise_sizes);
std::string specialised_symbol(const std::string& symbol, int64_t size);

}  // namespace kiln::compiler
