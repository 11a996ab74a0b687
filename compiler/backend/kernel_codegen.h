// Kernel codegen, the module level: assembles the kernels of one artifact into deterministic
// NVRTC module sources (a general and a specialised entry point per kernel), and the small
// helpers every family's codegen uses. Family codegen lives with its lowering rules
// in compiler/backend/lower/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cache/dtype.h"
#include "cache/kernel_signature.h"
#include "cache/status.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/ir/ir.h"

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

// A kernel that exists only specialised, for the listed sizes: a launch candidate (tuned, or
// being timed). Its entry points are specialised_symbol(def.symbol, size); no general one.
struct SizedKernel {
  KernelDef def;
  std::vector<int64_t> sizes;  // ascending, unique
};

// The full module: header comment, includes, then for every kernel a general entry point and
// one specialised entry point per size in `specialise_sizes` (symbol "<symbol>_s<size>"), then
// the sized kernels.
std::string codegen_module_source(const std::vector<KernelDef>& kernels,
                                  const std::vector<int64_t>& specialise_sizes,
                                  const std::vector<SizedKernel>& sized = {});
std::string specialised_symbol(const std::string& symbol, int64_t size);

// The artifact's modules, in the manifest's order: one per kernel of `program` (its general
// entry and one per size in `specialise_sizes`), then one per tuned_kernels(program) entry.
// One kernel per module: they compile in parallel, and a kernel that is byte-identical to one
// compiled before in this process (another model's, another compile's) is not compiled again
// (compiler/backend/nvrtc_compile.h).
std::vector<NvrtcModule> codegen_modules(const LoweredProgram& program,
                                         const std::vector<int64_t>& specialise_sizes);

// A candidate's symbol: "<default symbol>_v<16 hex digits of the hash of its text>", so it
// depends only on the code.
std::string candidate_symbol(const KernelDef& default_def, const LaunchCandidate& c);
// Every candidate of every kernel launch in `program`, named, for all of `sizes` (a candidate
// shared by several launches appears once). For compiling candidates to time or to test them.
std::vector<SizedKernel> candidate_kernels(const LoweredProgram& program,
                                           const std::vector<int64_t>& sizes);
// The candidates chosen by `tuned` decisions, each for the sizes it won (none when every
// decision kept the default). The artifact's module carries these.
std::vector<SizedKernel> tuned_kernels(const LoweredProgram& program);

// The parameter signature (cache/kernel_signature.h) of `def`: a code per parameter of its list,
// then 'l' for S; no extents. An error names the parameter whose type is none of const T*, T*,
// long long, int, float.
Result<cache::KernelSignature> kernel_param_signature(const KernelDef& def);
// Appends "__K<signature>" to the symbol of every kernel of `program` (call once, after
// lowering, before candidates are named or code is generated). A pointer parameter that every
// launch of the kernel binds to a tensor declares the bytes the kernel may touch there: the
// least, over those launches, of the tensor's byte size, as a lower bound linear in S (exact
// when each tensor has at most one dim that depends on S). The runtime checks every step's
// arguments against it (runtime/manifest_validate_program.cc).
Status kernel_signatures_attach(LoweredProgram& program, const ir::Graph& g);

}  // namespace kiln::compiler
