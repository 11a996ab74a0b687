// size_tables: values that depend only on the run-time size S are computed once, at compile
// time, and read at run time as the first rows of a table.
//
// Exporters compute per-run data from the sequence length alone: position ids (Range(0, S)),
// the rotary cos/sin tables from them (a Cast, a MatMul with the inverse frequencies, a
// Transpose, a Concat, Cos, Sin: seven launches every run for a Llama), the position embeddings
// gathered with them (GPT-2), BERT's position and token-type ids sliced from constant buffers.
// Such a value V, with one axis of extent c·S + d and only extents of 1 before it, is evaluated
// with the reference at S = max_size into a constant table T, and V becomes Slice(T, 0, c·S + d)
// on that axis: the first elements of T's buffer, which the back end reads in place (a view,
// no launch). The subgraph behind V goes.
//
// Soundness. V at size s must equal the first rows of V at max_size. The pass follows only ops
// that keep that property: elementwise ops, Cast, Where, MatMul (contracting a constant axis),
// Transpose, (Un)Squeeze, Reshape (the axes before and the size axis itself unchanged), Expand,
// Concat and Gather along constant axes, Slice from a constant non-negative start, Range from a
// constant start with a constant step, ConstantOfShape, Trilu. S itself (a symbolic shape value)
// may enter only as an extent: Range's limit, Slice's ends, Reshape's or Expand's shape,
// ConstantOfShape's shape; never as data (positions divided by S would not be a prefix). Each
// table is also checked against the reference at a few smaller sizes, and dropped if any
// differs. Float tables that a run-time Gather reads stay (a lookup table's dtype is the model's
// business, not this pass's), and so do tables above kMaxTableBytes.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

inline constexpr int64_t kMaxTableBytes = int64_t{64} << 20;

// Known at compile time without running anything: a constant, or a symbolic shape value (its
// elements functions of S).
bool value_known(const ir::Value& v);

// The values to turn into tables, shared with position_tables: `sources_only[v]` says value v is
// computed from the tables' sources alone (S, or the positions), `computed(v)` that it is such a
// value and not a source or a constant itself. From the computed inputs of every other node,
// walking back: a value `fits` accepts is a table; for one it rejects, its producer's computed
// inputs are considered instead. Returns them in id order.
std::vector<int> table_values(const ir::Graph& g, const std::vector<bool>& sources_only,
                              const std::function<bool(int)>& computed,
                              const std::function<bool(int)>& fits);

// Folds every such value; `max_size` is the largest S. Returns the number of tables made.
Result<int> fold_size_tables(ir::Graph& g, int64_t max_size);

}  // namespace kiln::compiler
