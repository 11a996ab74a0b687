#include "compiler/frontend/front_end.h"

#include "compiler/frontend/canonicalize.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/cse.h"
#include "compiler/passes/fuse_gated_mlp.h"
#include "compiler/passes/fuse_gelu.h"
#include "compiler/passes/fuse_norms.h"
#include "compiler/passes/fuse_qkv.h"
#include "compiler/passes/fuse_rotary.h"
#include "compiler/passes/kv_paged.h"
#include "compiler/passes/legalize_variants.h"
#include "compiler/passes/paged_rotary.h"
#include "compiler/passes/position_tables.h"
#include "compiler/passes/simplify_attention.h"
#include "compiler/passes/size_tables.h"

namespace kiln::compiler {

Status front_end_passes(ir::Graph& g, int64_t max_size, std::vector<AttentionNote>* notes,
                        FrontEndFusion fusion) {
  KILN_RETURN_IF_ERROR(canonicalize(g).with_context("canonicalize"));
  KILN_RETURN_IF_ERROR(legalize_variants(g).with_context("legalize_variants"));
  if (fusion == FrontEndFusion::kAll) {
    KILN_RETURN_IF_ERROR(cse(g).with_context("cse"));
    KILN_RETURN_IF_ERROR(fuse_norms(g).with_context("fuse_norms"));
    KILN_RETURN_IF_ERROR(fuse_gelu(g).with_context("fuse_gelu"));
    KILN_RETURN_IF_ERROR(fuse_rotary(g).with_context("fuse_rotary"));
  }
  FuseOptions fo;
  fo.max_size = max_size;
  fo.notes = notes;
  KILN_RETURN_IF_ERROR(fuse_attention(g, fo).with_context("fuse_attention"));
  KILN_RETURN_IF_ERROR(simplify_attention(g, max_size).with_context("simplify_attention"));
  KILN_RETURN_IF_ERROR(canonicalize(g).with_context("canonicalize"));
  return ir::graph_verify(g);
}

Status front_end_passes_for(ir::Graph& g, const CompileConfig& config,
                            std::vector<AttentionNote>* notes) {
  // Level 0 fuses attention only: unfused, its S x S scores and masks have no shape linear in
  // the size, and padded rows would reach real ones through the softmax.
  KILN_RETURN_IF_ERROR(front_end_passes(
      g, config.max_size, notes,
      config_fuses(config) ? FrontEndFusion::kAll : FrontEndFusion::kAttentionOnly));
  if (config.kv_cache) {
    KILN_RETURN_IF_ERROR(kv_paged_rewrite(g).with_context("kv_paged (generation)"));
    if (config_fuses(config))
      KILN_RETURN_IF_ERROR(fold_paged_rotary(g).with_context("paged_rotary (generation)"));
    KILN_RETURN_IF_ERROR(canonicalize(g).with_context("canonicalize"));
  }
  // Last: the rewrites above find attention's Q, K and V where the export computed them.
  if (config_fuses(config)) {
    KILN_RETURN_IF_ERROR(fuse_qkv(g).with_context("fuse_qkv"));
    KILN_RETURN_IF_ERROR(fuse_gated_mlp(g).with_context("fuse_gated_mlp"));
    // After every rewrite that looks for the positions' subgraphs (kv_paged, fuse_rotary).
    if (config.kv_cache)
      KILN_RETURN_IF_ERROR(fold_position_tables(g, config.kv_cache->max_seq_len)
                               .status()
                               .with_context("position_tables (generation)"));
    KILN_RETURN_IF_ERROR(fold_size_tables(g, config.max_size).status().with_context("size_tables"));
  }
  return Status::ok_status();
}

Result<FrontEnd> front_end_run(const std::filesystem::path& model, const CompileConfig& requested) {
  const CompileConfig config = config_at_level(requested);
  ImportOptions opts{config.size_dim, config.dims};
  opts.max_size = config.max_size;
  opts.generation = config.kv_cache.has_value();
  FrontEnd fe;
  KILN_ASSIGN_OR_RETURN(fe.graph, onnx_import_file(model, opts));
  KILN_RETURN_IF_ERROR(
      front_end_passes_for(fe.graph, config, &fe.attention_notes).with_context(model.string()));
  KILN_ASSIGN_OR_RETURN(std::vector<Piece> pieces, graph_split(fe.graph, config.splitting_ops));
  fe.graph = graph_in_piece_order(fe.graph, pieces);
  // Re-split the reordered graph so the piece node indexes refer to it.
  KILN_ASSIGN_OR_RETURN(fe.pieces, graph_split(fe.graph, config.splitting_ops));
  return fe;
}

int front_end_attention_count(const ir::Graph& g) {
  int n = 0;
  for (const ir::Node& node : g.nodes)
    n += node.domain == "kiln" && (node.op == "Attention" || node.op == "PagedAttention");
  return n;
}

}  // namespace kiln::compiler
