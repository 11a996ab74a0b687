// Small graph-editing helpers shared by the rewrite passes. They keep the node list in
// topological order and every value's `producer` index right.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// A new value without producer; the name is `hint`, made unique with a numeric suffix.
int graph_new_value(ir::Graph& g, const std::string& hint, DType dtype, ir::Shape shape);
// A new constant value (data given as doubles, stored as `dtype`).
int graph_new_constant(ir::Graph& g, const std::string& hint, DType dtype,
                       std::vector<int64_t> dims, const std::vector<double>& data);
// Inserts `n` before node index `pos` (pos == nodes.size() appends); its outputs' producer is
// set and every later producer index shifted. Returns the new node's index.
int graph_insert_node(ir::Graph& g, size_t pos, ir::Node n);
// Replaces node `pos` by `n`, which must output the same values (or a subset); keeps order.
void graph_replace_node(ir::Graph& g, size_t pos, ir::Node n);
// Redirects every node input and graph output reading `from` to `to`.
void graph_replace_uses(ir::Graph& g, int from, int to);
// For each value id, the indexes of the nodes that read it (a node reading twice appears twice).
std::vector<std::vector<int>> graph_users(const ir::Graph& g);
// Removes nodes whose outputs nothing reads and that are not graph outputs, until none is left.
void graph_remove_dead(ir::Graph& g);
// An ONNX Cast whose output has its input's dtype: a no-op (an f32 export's casts around its
// norms, before or after precision lowering), which canonicalize and precision_lower drop.
bool graph_is_same_dtype_cast(const ir::Graph& g, const ir::Node& n);
// A node name not used yet, from `hint`.
std::string graph_unique_node_name(const ir::Graph& g, const std::string& hint);

}  // namespace kiln::compiler
