// The driver the fusion passes share (fuse_norms, fuse_gelu, fuse_rotary, fuse_attention): each
// pass keeps its matcher and its rewrite; collecting, applying and tidying up happen here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {

// Runs a fusion pass in three steps:
//   1. collect: match(pv, node, plans) for every node, over a read-only PatternView of the graph
//      (node indexes stay valid: nothing is edited yet); it appends what it finds to `plans`;
//   2. apply: apply(g, plan) for each plan, in order. It rewrites the graph and returns true, or
//      returns false having changed no node (e.g. when the fused op's shape inference disagrees);
//      the values it added are then dropped, since nothing reads them;
//   3. tidy: the nodes the fused ones left unread are removed and the graph is verified.
template <typename Plan, typename Match, typename Apply>
Status run_fusion(ir::Graph& g, Match match, Apply apply) {
  std::vector<Plan> plans;
  {
    const PatternView pv(g);
    for (const ir::Node& n : g.nodes) match(pv, n, plans);
  }
  for (Plan& p : plans) {
    const size_t first_new_value = g.values.size();
    if (!apply(g, std::move(p))) g.values.resize(first_new_value);
  }
  graph_remove_dead(g);
  return ir::graph_verify(g);
}

// The node a fusion ending in `out` replaces: the producer of `out` when `out` is its only
// output; -1 otherwise (the plan no longer applies).
inline int fused_node_index(const ir::Graph& g, int out) {
  const int pos = g.values[out].producer;
  if (pos < 0 || g.nodes[static_cast<size_t>(pos)].outputs != std::vector<int>{out}) return -1;
  return pos;
}

// The largest S at which the fusions that do not depend on S check the fused op's inference.
inline constexpr int64_t kFuseCheckMaxSize = int64_t{1} << 16;

// Replaces node `pos` by `fused` when the fused op's shape inference agrees with the values it
// outputs; false, leaving the graph unchanged, otherwise.
inline bool replace_if_agrees(ir::Graph& g, int pos, ir::Node fused) {
  if (!infer_agrees(g, fused, kFuseCheckMaxSize)) return false;
  graph_replace_node(g, static_cast<size_t>(pos), std::move(fused));
  return true;
}

}  // namespace kiln::compiler
