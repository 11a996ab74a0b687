#include "compiler/frontend/canonicalize.h"

#include <algorithm>
#include <vector>

#include "compiler/passes/graph_edit.h"

namespace kiln::compiler {
namespace {

// Identity, Dropout (inference), and a Cast to its input's own dtype (an f32 export's casts
// around its norms; each was a launch of its own where nothing absorbed it).
bool is_noop(const ir::Graph& g, const ir::Node& n) {
  return graph_is_same_dtype_cast(g, n) ||
         (n.domain.empty() && (n.op == "Identity" || n.op == "Dropout"));
}

}  // namespace

Status canonicalize(ir::Graph& g) {
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[v] = true;

  // 1. Rewire consumers of no-op outputs to the no-op's input.
  std::vector<int> replace(g.values.size());
  for (size_t v = 0; v < replace.size(); ++v) replace[v] = static_cast<int>(v);
  for (const ir::Node& n : g.nodes) {
    if (!is_noop(g, n) || n.inputs.empty() || n.inputs[0] < 0) continue;
    for (size_t o = 1; o < n.outputs.size(); ++o)
      if (n.outputs[o] >= 0 && !g.values[n.outputs[o]].name.empty())
        return unimplemented("node '" + n.name + "' (" + n.op + "): only output 0 is supported");
    replace[n.outputs[0]] = replace[n.inputs[0]];
  }
  for (ir::Node& n : g.nodes)
    for (int& in : n.inputs)
      if (in >= 0) in = replace[in];

  // 2. Keep nodes whose outputs are used (walk backwards from the graph outputs).
  std::vector<bool> used(g.values.size(), false);
  for (int v : g.outputs) used[v] = true;
  std::vector<bool> keep(g.nodes.size(), false);
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const ir::Node& n = g.nodes[i];
    bool needed =
        std::any_of(n.outputs.begin(), n.outputs.end(), [&](int o) { return o >= 0 && used[o]; });
    // A no-op survives only to give a graph output its name.
    if (is_noop(g, n)) needed = n.outputs[0] >= 0 && is_output[n.outputs[0]];
    if (!needed) continue;
    keep[i] = true;
    for (int in : n.inputs)
      if (in >= 0) used[in] = true;
  }

  std::vector<ir::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i]) {
      for (int o : g.nodes[i].outputs)
        if (o >= 0) g.values[o].producer = -1;
      continue;
    }
    for (int o : g.nodes[i].outputs)
      if (o >= 0) g.values[o].producer = static_cast<int>(nodes.size());
    nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
  return ir::graph_verify(g);
}

}  // namespace kiln::compiler
