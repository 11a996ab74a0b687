// Simplifies attention that arrived as an op (ONNX Attention, com.microsoft MultiHeadAttention /
// Attention, lowered to kiln.Attention by legalize_variants) rather than as a decomposed pattern:
// - its mask input is classified like fuse_attention's (mask_classify) and becomes `causal`
//   and/or a key_padding input when that is what it computes;
// - keys/values repeated per query head (GQA written as Unsqueeze/Expand/Reshape before the op)
//   are read before the repetition, so kiln.Attention sees the real key/value head count.
#pragma once

#include <cstdint>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status simplify_attention(ir::Graph& g, int64_t max_size);

}  // namespace kiln::compiler
