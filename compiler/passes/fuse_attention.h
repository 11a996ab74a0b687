// Fuses every decomposed attention (MatMul(Q, Kᵀ) → scale → mask → Softmax → MatMul(V), with
// the exporters' Transposes/Reshapes and GQA key/value repetition) into kiln.Attention; masks
// are classified (causal / padding from an input / general) by evaluating their subgraphs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// Why a Softmax that looked like attention's did not become kiln.Attention, or why its mask
// stayed general (a materialised input): what `kiln inspect` shows.
struct AttentionNote {
  std::string node;  // the Softmax (no attention formed) or the fused attention (general mask)
  std::string reason;
};

struct FuseOptions {
  int64_t max_size = 64;  // S ranges over [1, max_size]; masks are evaluated at sizes within it
  std::vector<AttentionNote>* notes = nullptr;  // when set, receives one note per miss
};

Status fuse_attention(ir::Graph& g, const FuseOptions& opts);

}  // namespace kiln::compiler
