// Fuses every decomposed attention (MatMul(Q, Kᵀ) → scale → mask → Softmax → MatMul(V), with
// the exporters' Transposes/Reshapes and GQA key/value repetition) into kiln.Attention; masks
// are classified (causal / padding from an input / general) by evaluating their subgraphs.
#pragma once

#include <cstdint>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct FuseOptions {
  int64_t max_size = 64;  // S ranges over [1, max_size]; masks are evaluated at sizes within it
};

Status fuse_attention(ir::Graph& g, const FuseOptions& opts);

}  // namespace kiln::compiler
