#include "compiler/backend/lowering.h"

#include <fmt/format.h>

#include <map>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/lower_rules.h"
#include "compiler/ops/op_folds.h"
#include "compiler/passes/graph_split.h"
#include "compiler/passes/padding_taint.h"

namespace kiln::compiler {
namespace {

std::map<std::string, LowerFn> rule_table() {
  std::map<std::string, LowerFn> table;
  for (const LowerRule& r : lower_rules_all()) table.emplace(r.op, r.fn);
  return table;
}

// Why node `n` has no rule: not lowered yet (with the reason), or a folded op that the front end
// kept (a variant kiln's ops cannot express).
Status no_rule(const ir::Node& n) {
  if (const UnloweredOp* u = unlowered_op_find(n.domain, n.op))
    return lower_unsupported(n, fmt::format("no lowering for this op yet ({})", u->reason));
  if (const OpFold* f = op_fold_find(n.domain, n.op))
    return lower_unsupported(
        n, fmt::format("{} rewrites this op into {}, but kept this node: kiln's ops cannot "
                       "express this variant of it",
                       f->by, f->becomes));
  return lower_unsupported(n, "no lowering for this op yet");
}

bool all_outputs_constant(const ir::Graph& g, const ir::Node& n) {
  for (int o : n.outputs)
    if (o >= 0 && !g.values[o].constant && !g.values[o].ints) return false;
  return !n.outputs.empty();
}

}  // namespace

std::vector<int> step_values(const LaunchStep& step) {
  std::vector<int> out;
  if (const auto* k = std::get_if<KernelLaunch>(&step)) {
    for (const auto& a : k->args)
      if (a.kind == KernelArgRef::Kind::kValue) out.push_back(a.value);
  } else {
    const auto& gm = std::get<GemmLaunch>(step);
    out = {gm.a, gm.b};
    if (gm.bias >= 0) out.push_back(gm.bias);
    if (gm.c >= 0) out.push_back(gm.c);
    out.push_back(gm.d);
  }
  return out;
}

int resolve_alias(const LoweredProgram& prog, int v) {
  for (auto it = prog.aliases.find(v); it != prog.aliases.end(); it = prog.aliases.find(v))
    v = it->second;
  return v;
}

Result<LoweredProgram> lower_graph(ir::Graph& g, const LowerOptions& options) {
  KILN_ASSIGN_OR_RETURN(std::vector<Piece> pieces, graph_split(g, options.splitting_ops));
  if (options.fuse) elementwise_sink(g, pieces);
  g = graph_in_piece_order(g, pieces);
  KILN_ASSIGN_OR_RETURN(pieces, graph_split(g, options.splitting_ops));
  std::vector<int> piece_of_node(g.nodes.size(), 0);
  std::vector<LoweredPiece> lowered;
  for (size_t p = 0; p < pieces.size(); ++p) {
    for (int n : pieces[p].nodes) piece_of_node[n] = static_cast<int>(p);
    lowered.push_back({pieces[p].kind == Piece::Kind::kSplit, pieces[p].hash, 0});
  }
  if (lowered.empty()) lowered.push_back({});

  if (options.padded_runs) KILN_RETURN_IF_ERROR(padding_taint_check(g));
  LowerContext cx(g, options.precision, std::move(piece_of_node), std::move(lowered));
  cx.set_padded_runs(options.padded_runs);
  cx.set_max_size(options.max_size);
  cx.set_kv_cache(options.kv_cache);
  cx.set_planned_sizes(options.planned_sizes, options.skinny_max_m, options.skinny_max_m_timed);
  cx.set_specialised_sizes(options.specialised_sizes);
  cx.set_fuse(options.fuse);
  KILN_RETURN_IF_ERROR(attention_absorb_views(cx));
  static const std::map<std::string, LowerFn> table = rule_table();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (cx.done(static_cast<int>(i))) continue;
    const ir::Node& n = g.nodes[i];
    if (all_outputs_constant(g, n)) {  // folded by the importer; its value lives in the weights
      cx.mark_done(static_cast<int>(i));
      continue;
    }
    auto it = table.find(n.qualified_op());
    if (it == table.end()) return no_rule(n);
    KILN_RETURN_IF_ERROR(it->second(cx, static_cast<int>(i)));
    cx.mark_done(static_cast<int>(i));
  }
  if (cx.deferred_norms_left() > 0)
    return internal_error("a norm was left to a GEMM that did not lower it");
  LoweredProgram prog = cx.finish();
  KILN_RETURN_IF_ERROR(kernel_signatures_attach(prog, g));
  return prog;
}

}  // namespace kiln::compiler
