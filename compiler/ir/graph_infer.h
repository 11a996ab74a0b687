// Shape inference and folding, one node at a time in topological order: each node's outputs get
// their dtype and symbolic shape from the op registry; then a node whose inputs are all known is
// folded — constant inputs give constant outputs (computed by the CPU reference), and shape
// arithmetic on symbolic values (Shape, Gather, Concat, ... of dims that depend on S) gives
// symbolic constants. Folded nodes are removed, so every shape-only subgraph disappears and
// Reshape/Expand/Slice targets become known expressions of S.
#pragma once

#include <cstdint>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct InferOptions {
  int64_t max_size = 1 << 16;  // S ranges over [1, max_size] (decides comparisons of dims)
  bool fold = true;            // false: infer only, keep every node (tests of single ops)
};

// Errors name the node, op and what disagreed. Unsupported ops are reported before this runs
// (onnx_check_ops), but an op missing from the registry is still an error here.
Status graph_infer(ir::Graph& g, const InferOptions& opts);

// Removes nodes whose outputs are all constants or symbolic constants (and are not graph
// outputs), renumbering producers. graph_infer calls it when folding.
void graph_drop_folded(ir::Graph& g);

}  // namespace kiln::compiler
