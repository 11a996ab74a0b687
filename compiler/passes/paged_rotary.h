// paged_rotary: a generation program's rotary embedding moves into its attention. Where both Q
// and K of a kiln.PagedAttention come from kiln.Rotary nodes over the same cos/sin tables (one
// value, or the same computation of it; with the same rotary_dim and interleaving) — directly, or
// through views that keep each head's row whole and each token in place (a Transpose leaving the
// last axis last, a Reshape adding or dropping dims of 1) that nothing else reads — the views read
// the unrotated Q and K, the attention takes the tables as [1, 1, T or 1, W] (kiln.PagedAttention
// inputs 3 and 4, compiler/ops/kiln_ops.md) and the Rotary nodes go: the paged kernels rotate each
// key as they append it to the cache and each query as they load it. This saves the two rotary
// launches, and the head transposes that fed them become views the attention reads through.
// Attention nodes whose tables hold the same data (every layer's, where an exporter gives each
// layer its own Unsqueeze of one cos/sin) read one pair of table views, so the tables are
// reshaped and cast to the compute dtype once per step, not once per layer. Tested in
// tests/compiler/passes/kv_paged_test.cc, with the generation programs it runs on.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// Runs after kv_paged_rewrite. The tables must hold one row per token (or one row for all
// tokens), broadcast over every other dim; attention whose rotary does not fit keeps its Rotary
// nodes.
Status fold_paged_rotary(ir::Graph& g);

}  // namespace kiln::compiler
