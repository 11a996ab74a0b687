// position_tables: in a generation program, values computed from the token positions alone are
// computed once, at compile time, for every position a sequence can have, and gathered per token
// at run time.
//
// A generation step's positions are run-time data (`position_ids` [1, T], which the runtime
// writes per token: kv_paged.h), so size_tables cannot fold what exporters compute from them:
// the rotary cos/sin tables of a Llama (a Cast, a MatMul with the inverse frequencies, a
// Transpose, a Concat, Cos and Sin, the attention scaling; six launches every step, and the two
// casts of the tables to the compute dtype after precision lowering). Such a value V, whose one
// axis of extent T is its token axis (extents of 1 before it, constants after), is evaluated with
// the reference for the positions 0 .. P - 1 (P = kv_cache.max_seq_len: the runtime never writes
// a position at or past it, and a padded row writes 0) into a constant table, and V becomes
// Gather(table, positions) — one launch, and the table takes the compute dtype with the rest of
// the weights. The subgraph behind V goes.
//
// Soundness. Row t of V must be a function of position t alone. The pass follows only ops that
// keep tokens apart (elementwise ops, Transpose, (Un)Squeeze, Reshape, Expand, Concat, MatMul
// contracting a constant axis), from position_ids and constants; the step's size T may enter
// only as an extent. Each table is also checked against the reference at positions in another
// order and at other step sizes, and dropped if any row differs; tables above kMaxTableBytes stay
// computed.
#pragma once

#include <cstdint>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// Folds every such value of a graph with a `position_ids` input; `positions` is the number of
// positions a sequence can have (P). Returns the number of tables made.
Result<int> fold_position_tables(ir::Graph& g, int64_t positions);

}  // namespace kiln::compiler
