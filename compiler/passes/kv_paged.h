// kv_paged: a KV-cache decoder export, imported as its prefill step (frontend/onnx_kv_cache),
// becomes a generation program (a config with `kv_cache:`). The program runs one step over a
// flat list of T tokens — batch 1, the tokens of any mix of sequences on the size axis — so
// every op but attention is per token. Each causal kiln.Attention becomes kiln.PagedAttention
// (compiler/ops/kiln_ops.md): append the step's keys and values to the runtime's cache of its
// layer, attend each token over its own sequence's cache. The presents go (the cache holds
// them); the attention mask goes when nothing else reads it (padding tokens are the runtime's
// business: they write nothing and read nothing). Each token's position comes from the input
// position_ids [1, T], which the runtime writes per token: an export without that input gets it,
// and the positions the graph computed itself (Range(0, S, 1), the index of a token within the
// prefill, as transformers' cache_position reads once the past is empty) read it instead.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "cache/dtype.h"
#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// The input the runtime writes each token's position into (int64 or int32 [1, T]).
inline constexpr char kPositionIds[] = "position_ids";

// position_ids as [S] of type `dt` (int64 or int32): a Reshape (and a Cast) at the graph's front,
// made once per type (`made`, the caller's record of those made so far).
int flat_positions(ir::Graph& g, int pos, DType dt, std::map<DType, int>& made);

// What the runtime needs to know of a generation program (manifest: Generation).
struct GenerationShape {
  std::string input_ids, position_ids, attention_mask;  // graph inputs; mask "" when none
  std::string logits;                                   // the one graph output [1, T, vocab]
  int64_t vocab = 0;
  DType logits_dtype = DType::kF32;
  int64_t layers = 0;    // kiln.PagedAttention nodes; their `layer` attributes are 0..layers-1
  int64_t kv_heads = 0;  // Hkv of every layer
  int64_t head_dim = 0;  // D of keys and values alike
  DType kv_dtype = DType::kF32;  // the attention's dtype (after precision lowering)
};

// The rewrite, on the fused graph (after front_end_passes, before precision lowering). Errors
// name what stops a model from generating: no KV cache, no input_ids [1, T] (or a position_ids
// that is not [1, T]), an attention that is not causal or has a mask other than key padding, keys
// with another head size than values, outputs other than the logits, and values computed from
// the step alone (its size, the attention mask the runtime feeds as ones) that differ from token
// to token or with the number of tokens — positions from a cumulative sum of the mask, say.
Status kv_paged_rewrite(ir::Graph& g);

// The generation program's shape, read off a rewritten (and possibly precision-lowered) graph.
Result<GenerationShape> generation_shape(const ir::Graph& g);

}  // namespace kiln::compiler
