// Splitting: cuts the graph at the configured splitting ops (attention by default) into pieces
// in execution order — each cut op alone in a piece, the nodes between two cuts in a compute
// piece — and gives every piece a structural hash, so identical pieces (a transformer's middle
// layers) are recognised and share code.
#pragma once

#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct Piece {
  enum class Kind { kCompute, kSplit };  // kSplit: one splitting op (e.g. attention)
  Kind kind = Kind::kCompute;
  std::vector<int> nodes;    // node indexes into the graph, in execution order
  std::vector<int> inputs;   // values read from outside the piece (not constants), first use order
  std::vector<int> outputs;  // values produced here and read by a later piece or a graph output
  // Structural hash (32 hex digits): ops, attributes, dtypes, symbolic shapes, the wiring inside
  // the piece, and small constants by value; weights (constants over 64 elements) by dtype and
  // shape only, since identical layers differ just in their weights.
  std::string hash;
};

// True when node `n` is one of `splitting_ops` ("attention" = kiln.Attention; other names are
// ONNX-domain op types).
bool piece_is_split_op(const ir::Node& n, const std::vector<std::string>& splitting_ops);

// Pieces in execution order. Each compute node goes into the earliest piece its inputs allow;
// the node order is a valid topological order of the whole graph.
Result<std::vector<Piece>> graph_split(const ir::Graph& g,
                                       const std::vector<std::string>& splitting_ops);

// The graph reordered so its nodes run piece by piece (what graph_split's order means).
ir::Graph graph_in_piece_order(const ir::Graph& g, const std::vector<Piece>& pieces);

// Number of distinct hashes among the compute pieces.
int unique_compute_pieces(const std::vector<Piece>& pieces);

}  // namespace kiln::compiler
