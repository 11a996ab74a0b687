// The lowered program: what the graph becomes before buffers get addresses. Steps refer to IR
// values by id; memory_plan gives them arena offsets and artifact_write turns the whole thing
// into the manifest's launch program.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "compiler/ir.h"

namespace kiln::compiler {

// A generated kernel: a C++ parameter list and a body that may use the identifier `S` (the
// run-time size, a `long long`). kernel_codegen wraps it as a general kernel (S a parameter,
// always the last) and one specialised kernel per compile size (S a constexpr).
struct KernelDef {
  std::string symbol;               // "kiln_ew_3"
  std::vector<std::string> params;  // "const float* __restrict__ in0", ... (without S)
  std::string body;
};

struct KernelArgRef {
  enum class Kind { kValue, kSize };
  Kind kind = Kind::kValue;
  int value = -1;  // IR value id for kValue
};

struct KernelLaunch {
  int kernel = -1;                 // index into LoweredProgram::kernels
  std::vector<KernelArgRef> args;  // matches KernelDef::params, then kSize last
  ir::DimExpr work;                // blocks = ceil(work(S) / work_per_block)
  uint32_t work_per_block = 256;
  uint32_t block = 256;
  std::string nodes;  // IR node names, for diagnostics
};

enum class Epilogue { kNone, kBias, kRelu, kBiasRelu };

struct GemmLaunch {
  int a = -1, b = -1, d = -1, bias = -1;  // IR value ids; bias -1 when absent
  ir::DimExpr m, n, k;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f;
  Epilogue epilogue = Epilogue::kNone;
  ir::DimExpr batch = ir::DimExpr::constant(1);
  ir::DimExpr stride_a, stride_b, stride_d;  // elements; 0 broadcasts
  std::string nodes;
};

using LaunchStep = std::variant<KernelLaunch, GemmLaunch>;

struct LoweredProgram {
  std::vector<KernelDef> kernels;
  std::vector<LaunchStep> steps;  // in execution order (one piece until attention splits land)
};

// Every IR value a step reads or writes, in argument order.
std::vector<int> step_values(const LaunchStep& step);

}  // namespace kiln::compiler
