#include "compiler/passes/simplify_attention.h"

#include "compiler/passes/graph_edit.h"
#include "compiler/passes/mask_classify.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {

namespace {

bool present(const ir::Node& n, size_t i) { return i < n.inputs.size() && n.inputs[i] >= 0; }

// K and V both repeated n times per head: read them before the repetition.
bool unrepeat(const ir::Graph& g, ir::Node& n) {
  const PatternView pv(g);
  int64_t nk = 0, nv = 0;
  const int k0 = unrepeat_kv(pv, n.inputs[1], nk);
  const int v0 = unrepeat_kv(pv, n.inputs[2], nv);
  if (k0 < 0 || v0 < 0 || nk != nv) return false;
  n.inputs[1] = k0;
  n.inputs[2] = v0;
  return true;
}

}  // namespace

Status simplify_attention(ir::Graph& g, int64_t max_size) {
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].domain != "kiln" || g.nodes[i].op != "Attention" || g.nodes[i].inputs.size() < 3)
      continue;
    ir::Node n = g.nodes[i];
    changed |= unrepeat(g, n);
    g.nodes[i] = n;
  }
  for (ir::Node& n : g.nodes) {
    if (n.domain != "kiln" || n.op != "Attention" || !present(n, 3) || present(n, 4)) continue;
    const ir::Shape& q = g.values[n.inputs[0]].shape;
    const ir::Shape& k = g.values[n.inputs[1]].shape;
    if (q.size() != 4 || k.size() != 4) continue;
    const MaskSite site{.terms = {{.value = n.inputs[3], .condition = false,
                                   .keep_when_true = true}},
                        .scores = {q[0], q[1], q[2], k[2]}};
    const MaskClass c = mask_classify(g, site, max_size);
    if (c.general) continue;
    if (c.causal) n.attrs["causal"] = int64_t{1};
    n.inputs[3] = -1;
    if (c.key_padding >= 0) {
      n.inputs.resize(5, -1);
      n.inputs[4] = c.key_padding;
    }
    while (!n.inputs.empty() && n.inputs.back() < 0) n.inputs.pop_back();
    changed = true;
  }
  if (changed) graph_remove_dead(g);
  return ir::graph_verify(g);
}

}  // namespace kiln::compiler
