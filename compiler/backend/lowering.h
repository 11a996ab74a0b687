// Lowering: a fused ir::Graph → LoweredProgram (README.md, "How it works", steps 4-5). The graph is
// cut into pieces (graph_split) and put in piece order; then each node goes to the rule of its op's
// family (compiler/backend/lower/lower_rules.h): GEMMs to cuBLASLt with epilogues, elementwise
// chains and norms into generated kernels, views into aliases, attention into the attention
// kernels.
//
// Padding safety: the runtime pads a request of size S up to a captured size, so no op may mix
// values across the size dimension. Rules refuse graphs where S reaches a reduced axis (a GEMM's
// K, a softmax or norm axis) with an error naming the node.
#pragma once

#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/config.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct LowerOptions {
  Precision precision = Precision::kF32;  // tf32 picks tensor-core GEMMs for f32 data
  std::vector<std::string> splitting_ops = {"attention"};
  bool padded_runs = true;  // false only when there are no capture sizes: every run is exact
  int64_t max_size = 0;     // config max_size, the largest S; 0: unknown
  const KvCacheConfig* kv_cache = nullptr;  // a generation program (kiln.PagedAttention)
  // The padded sizes the runtime will run at for certain (compile and capture sizes): GEMMs
  // whose M is small at some of them get a skinny-GEMM kernel for those sizes.
  std::vector<int64_t> planned_sizes = {};
  // Those of them with kernels specialised for them (config compilation.compile_sizes).
  std::vector<int64_t> specialised_sizes = {};
  int64_t skinny_max_m = 4;  // config compilation.skinny_gemm_max_m; 0: no skinny GEMMs
  // At the specialised sizes, where the tuner times each GEMM's skinny kernel against cuBLASLt
  // (SkinnyLimits::timed); below skinny_max_m: skinny_max_m.
  int64_t skinny_max_m_timed = 0;
  // false (compilation level 0): every node is its own step; no elementwise groups, GEMM
  // epilogues or residual norms (views still alias, attention still takes its views).
  bool fuse = true;
};

// Reorders `g` into piece order and may add values to it (intermediates such as a GEMM result
// before a general-C add, or a beta-scaled bias constant).
Result<LoweredProgram> lower_graph(ir::Graph& g, const LowerOptions& options = {});

// Resolves a value through LoweredProgram::aliases to the value that owns its buffer.
int resolve_alias(const LoweredProgram& prog, int v);

}  // namespace kiln::compiler
