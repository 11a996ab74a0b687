// The whole front end (README.md, "How it works", steps 1, 2, 4): import (with constant and shape
// folding), canonicalise, map op variants onto the internal op set, fuse (norms, GELU, rotary,
// attention), and split into pieces. `kiln compile` and `kiln inspect` both go through here.
#pragma once

#include <filesystem>
#include <vector>

#include "cache/status.h"
#include "compiler/config.h"
#include "compiler/ir/ir.h"
#include "compiler/passes/fuse_attention.h"
#include "compiler/passes/graph_split.h"

namespace kiln::compiler {

struct FrontEnd {
  ir::Graph graph;            // fused, nodes in piece order
  std::vector<Piece> pieces;  // execution order
  std::vector<AttentionNote> attention_notes;  // Softmaxes not fused, masks left general
};

// Which fusion passes run: all (compilation levels 1-3), or attention only (level 0).
enum class FrontEndFusion { kAll, kAttentionOnly };

// Runs the passes after import, in order: canonicalize, legalize_variants, cse, fuse_norms,
// fuse_gelu, fuse_rotary, fuse_attention, simplify_attention, canonicalize again (drops what
// fusion left dead). kAttentionOnly skips cse, fuse_norms, fuse_gelu and fuse_rotary.
// `notes`, when set, receives fuse_attention's notes.
Status front_end_passes(ir::Graph& g, int64_t max_size, std::vector<AttentionNote>* notes = nullptr,
                        FrontEndFusion fusion = FrontEndFusion::kAll);

// front_end_passes at the config's compilation level, then, when the config has `kv_cache:`,
// the generation rewrite (passes/kv_paged: attention over the runtime's paged cache, presents
// dropped). `config` is taken as is: callers with a user's config pass config_at_level(it).
Status front_end_passes_for(ir::Graph& g, const CompileConfig& config,
                            std::vector<AttentionNote>* notes = nullptr);

// Import with the config's size_dim/dims/max_size, passes, then split at its splitting_ops (all
// at the config's compilation level).
Result<FrontEnd> front_end_run(const std::filesystem::path& model, const CompileConfig& config);

// Number of kiln.Attention and kiln.PagedAttention nodes.
int front_end_attention_count(const ir::Graph& g);

}  // namespace kiln::compiler
