// attention_rotary: the rotary embedding of Q and K moves into their attention. Where both Q and
// K of a kiln.Attention or kiln.PagedAttention come from kiln.Rotary nodes over the same cos/sin
// tables (one value, or the same computation of it; with the same rotary_dim and interleaving) —
// directly, or through views that keep each head's row whole and each token in place (a
// Transpose leaving the last axis last, a Reshape adding or dropping dims of 1) that nothing else
// reads — the views read the unrotated Q and K, the attention takes the tables (inputs 3 and 4
// of kiln.PagedAttention, 5 and 6 of kiln.Attention; compiler/ops/kiln_ops.md) and the Rotary
// nodes go. The kernels rotate each query and key as they load them (the paged ones each key as
// they append it to the cache): the rotary launch goes, and the head transposes that fed it
// become views the attention reads through.
//
// The tables must hold one row per token (or one row for all), broadcast over heads; a
// kiln.Attention's may also hold one per batch row. kiln.Attention folds where its queries and
// keys are the same tokens (Sq = Skv) and more than one (the one-row decode kernels do not
// rotate). Attention nodes whose tables hold the same data (every layer's, where an exporter
// gives each layer its own Unsqueeze of one cos/sin) read one pair of table views, so the tables
// are reshaped and cast to the compute dtype once per run, not once per layer. Tested in
// tests/compiler/passes/attention_rotary_test.cc and, with the generation programs it runs on,
// tests/compiler/passes/kv_paged_test.cc.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// Runs after kv_paged_rewrite (generation programs) and before fuse_qkv; attention whose rotary
// does not fit keeps its Rotary nodes.
Status fold_attention_rotary(ir::Graph& g);

}  // namespace kiln::compiler
