// Kernel codegen, the module level: assembles the kernels of one artifact into one
// deterministic NVRTC module source (a general and a specialised entry point per kernel), and
// the small helpers every family's codegen uses. Family codegen lives with its lowering rules
// in compiler/lower/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/dtype.h"
#include "compiler/ir.h"
#include "compiler/launch_plan.h"

namespace kiln::compiler {

// The embedded text of kernels/<name> ("reduce.cuh"); empty when there is no such file.
std::string_view embedded_file(std::string_view name);
std::vector<std::string_view> embedded_file_names();  // in kernels/meson.build order
// The template headers every module includes, as (name, text) pairs.
std::vector<std::pair<std::string, std::string>> kernel_headers();

// C++ expression for a dim in terms of `S`, e.g. "(2LL*S+1LL)" or "128LL".
std::string dim_code(const ir::DimExpr& d);
// An exact float literal (through its bit pattern; NaN/Inf safe): "__int_as_float(0x3f800000)".
std::string float_literal(float v);
// The kernel element type of a dtype (kernels/dtype.cuh): "float", "kiln::f16", "kiln::bf16",
// "long long", "int", "unsigned char" (bool, u8), "signed char"; empty for others (f64).
std::string_view kernel_ctype(DType t);

// The full module: header comment, includes, then for every kernel a general entry point and
// one specialised entry point per size in `specialise_sizes` (symbol "<symbol>_s<size>").
std::string codegen_module_source(const std::vector<KernelDef>& kernels,
                                  const std::vector<int64_t>& specialise_sizes);
std::string specialised_symbol(const std::string& symbol, int64_t size);

}  // namespace kiln::compiler
