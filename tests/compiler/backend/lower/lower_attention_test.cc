// Attention lowering (compiler/backend/lower/lower_attention.cc, attention_codegen): which kernels
// a kiln.Attention becomes, the view chains it absorbs (the step reads the QKV GEMM buffer and
// writes the merged-heads buffer), that every kernel variant NVRTC-compiles for sm_80 and
// sm_90 in f32, f16 and bf16, and the prefill's launch candidates for the autotuner (tile
// shapes, SIMT block sizes): well-formed, and each NVRTC-compiles.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <set>
#include <string>
#include <variant>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/config.h"
#include "compiler/frontend/front_end.h"
#include "compiler/passes/precision.h"
#include "tests/support/ir_harness.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

// GPT-2 style: one QKV GEMM, Split on the last axis, Reshape → Transpose per head group,
// attention, Transpose → Reshape back, then the output projection.
std::string gpt2_block(int heads, int head_dim, bool causal) {
  const int hidden = heads * head_dim;
  return fmt::format(R"(<ir_version: 10, opset_import: ["" : 23]>
g (float[2, N, {0}] x, float[{0}, {1}] w, float[{0}, {0}] wo) => (float[2, N, {0}] y) {{
  qkv = MatMul(x, w)
  q2, k2, v2 = Split<axis = 2, num_outputs = 3>(qkv)
  shp = Constant<value_ints = [2, -1, {2}, {3}]>()
  q3 = Reshape(q2, shp)
  k3 = Reshape(k2, shp)
  v3 = Reshape(v2, shp)
  q = Transpose<perm = [0, 2, 1, 3]>(q3)
  k = Transpose<perm = [0, 2, 1, 3]>(k3)
  v = Transpose<perm = [0, 2, 1, 3]>(v3)
  a = Attention<is_causal = {4}>(q, k, v)
  at = Transpose<perm = [0, 2, 1, 3]>(a)
  shp2 = Constant<value_ints = [2, -1, {0}]>()
  m = Reshape(at, shp2)
  y = MatMul(m, wo)
}})",
                     hidden, 3 * hidden, heads, head_dim, causal ? 1 : 0);
}

struct Lowered {
  ir::Graph graph;
  LoweredProgram prog;
};

Lowered lower_text(const std::string& text, Precision precision) {
  Lowered out;
  out.graph = testing::import_text_ok(text, ImportOptions{"N", {}});
  Status s = front_end_passes(out.graph, 1024);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = precision_lower(out.graph, precision);
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto prog = lower_graph(out.graph, LowerOptions{precision, {"attention"}});
  EXPECT_TRUE(prog.ok()) << prog.status().to_string();
  if (prog.ok()) out.prog = std::move(*prog);
  return out;
}

std::vector<const KernelLaunch*> attention_steps(const LoweredProgram& prog) {
  std::vector<const KernelLaunch*> out;
  for (const LaunchStep& st : prog.steps)
    if (const auto* k = std::get_if<KernelLaunch>(&st))
      if (prog.kernels[k->kernel].symbol.starts_with("kiln_attention")) out.push_back(k);
  return out;
}

void expect_compiles(const LoweredProgram& prog, const std::string& what) {
  NvrtcModule m{"attention_test", codegen_module_source(prog.kernels, {8}), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << what << " " << arch << ": " << cubin.status().to_string();
  }
}

TEST(LowerAttention, Gpt2ViewsAreAbsorbedIntoOneStep) {
  const Lowered l = lower_text(gpt2_block(4, 16, true), Precision::kF32);
  // QKV GEMM, attention, output GEMM: the Split/Reshape/Transpose chains cost no launch.
  ASSERT_EQ(l.prog.steps.size(), 3u);
  const auto* qkv = std::get_if<GemmLaunch>(&l.prog.steps[0]);
  const auto* at = std::get_if<KernelLaunch>(&l.prog.steps[1]);
  const auto* out = std::get_if<GemmLaunch>(&l.prog.steps[2]);
  ASSERT_TRUE(qkv && at && out);
  ASSERT_EQ(attention_steps(l.prog).size(), 1u);
  ASSERT_GE(at->args.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(at->args[i].value, qkv->d) << "input " << i;
  EXPECT_EQ(resolve_alias(l.prog, out->a), at->args[3].value);  // writes the [B, S, H·D] buffer
  const std::string& body = l.prog.kernels[at->kernel].body;
  // K starts 64 elements into each 192-wide row; heads 16 apart; rows 192 apart.
  EXPECT_NE(body.find("p.k = k + 64LL;"), std::string::npos) << body;
  EXPECT_NE(body.find("p.q_ss = 192LL;"), std::string::npos) << body;
  EXPECT_NE(body.find("p.q_sh = 16LL;"), std::string::npos) << body;
  EXPECT_NE(body.find("p.o_ss = 64LL;"), std::string::npos) << body;
  EXPECT_NE(body.find("attention_prefill_simt"), std::string::npos) << body;
  EXPECT_EQ(at->grid_y, DimExpr::constant(8));  // B·Hq
  expect_compiles(l.prog, "gpt2 f32");
}

TEST(LowerAttention, HalfPrecisionHeadDim64UsesTensorCores) {
  for (Precision p : {Precision::kF16, Precision::kBF16}) {
    const Lowered l = lower_text(gpt2_block(2, 64, true), p);
    const auto steps = attention_steps(l.prog);
    ASSERT_EQ(steps.size(), 1u);
    const std::string& body = l.prog.kernels[steps[0]->kernel].body;
    EXPECT_NE(body.find("attention_prefill_mma"), std::string::npos) << body;
    EXPECT_GT(steps[0]->shared_bytes, 0u);
    expect_compiles(l.prog, std::string(precision_name(p)));
  }
}

TEST(LowerAttention, SplitWithAnOutsideConsumerIsNotAbsorbed) {
  // v2 also feeds the output: the Split must run, so the chains stop at its outputs.
  std::string text = gpt2_block(4, 16, true);
  text.replace(text.find("y = MatMul(m, wo)"), 17, "y0 = MatMul(m, wo)\n  y = Add(y0, v2)");
  const Lowered l = lower_text(text, Precision::kF32);
  const auto steps = attention_steps(l.prog);
  ASSERT_EQ(steps.size(), 1u);
  for (const LaunchStep& st : l.prog.steps) {
    if (const auto* g = std::get_if<GemmLaunch>(&st)) {
      for (int i = 0; i < 3; ++i) EXPECT_NE(steps[0]->args[i].value, g->d);
    }
  }
}

// Every template instantiation the lowering emits, compiled through the codegen directly.
AttnSpec contiguous_spec(DType t, int64_t d, bool causal, bool mask, bool kpad, DimExpr sq) {
  AttnSpec s;
  s.dtype = t;
  s.B = DimExpr::constant(2);
  s.Hq = 4;
  s.Hkv = 2;
  s.Sq = sq;
  s.Skv = DimExpr::size();
  s.D = s.Dv = d;
  s.scale = 0.125f;
  s.causal = causal;
  s.q = s.o = attn_view_contiguous({s.B, DimExpr::constant(4), sq, DimExpr::constant(d)});
  s.k = s.v = attn_view_contiguous({s.B, DimExpr::constant(2), s.Skv, DimExpr::constant(d)});
  s.has_mask = mask;
  s.mask_dtype = t;
  s.mask_st = {DimExpr::constant(0), DimExpr::constant(0), s.Skv, DimExpr::constant(1)};
  s.has_kpad = kpad;
  s.kpad_dtype = DType::kI64;
  s.kpad_sb = s.Skv;
  return s;
}

TEST(LowerAttention, EveryVariantCompiles) {
  std::vector<KernelDef> defs;
  int mma = 0;
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t d : {16, 64, 80, 96, 128})
      for (int flags : {0, 3}) {  // the other two combinations below, for one case
        const bool causal = flags & 1, extras = flags & 2;
        AttnSpec s = contiguous_spec(t, d, causal, extras, extras, DimExpr::size());
        AttnKernel k = codegen_attention_prefill(s);
        mma += attention_mma_eligible(s);
        k.def.symbol = fmt::format("prefill_{}", defs.size());
        defs.push_back(k.def);
        s = contiguous_spec(t, d, causal, extras, extras, DimExpr::constant(1));
        for (int64_t nsplit : {int64_t{1}, int64_t{4}}) {
          AttnKernel ks = codegen_attention_decode_split(s, nsplit);
          ks.def.symbol = fmt::format("split_{}", defs.size());
          defs.push_back(ks.def);
        }
        AttnKernel kc = codegen_attention_decode_combine(s, 4);
        kc.def.symbol = fmt::format("combine_{}", defs.size());
        defs.push_back(kc.def);
      }
  for (int flags : {1, 2}) {
    AttnKernel k = codegen_attention_prefill(
        contiguous_spec(DType::kF16, 64, flags & 1, flags & 2, flags & 2, DimExpr::size()));
    k.def.symbol = fmt::format("prefill_{}", defs.size());
    defs.push_back(k.def);
  }
  EXPECT_EQ(mma, 2 * 4 * 2);  // f16, bf16 × D 64..128 × flags
  LoweredProgram prog;
  prog.kernels = defs;
  expect_compiles(prog, "all variants");
}

TEST(LowerAttention, MisalignedHalfViewFallsBackToSimt) {
  AttnSpec s = contiguous_spec(DType::kF16, 64, true, false, false, DimExpr::size());
  EXPECT_TRUE(attention_mma_eligible(s));
  s.k.offset = DimExpr::constant(4);  // not 16-byte aligned
  EXPECT_FALSE(attention_mma_eligible(s));
  EXPECT_NE(codegen_attention_prefill(s).def.body.find("simt"), std::string::npos);
  s = contiguous_spec(DType::kF16, 64, true, false, false, DimExpr::size());
  s.k.st[3] = DimExpr::size();  // Kᵀ layout: head dim strided
  EXPECT_FALSE(attention_mma_eligible(s));
}

TEST(LowerAttention, DecodeSplitsLongKeysAcrossBlocks) {
  AttnSpec s = contiguous_spec(DType::kF16, 64, false, false, false, DimExpr::constant(1));
  s.Skv = DimExpr::constant(4096);
  EXPECT_GT(attention_decode_splits(s), 1);
  s.Skv = DimExpr::constant(100);
  EXPECT_EQ(attention_decode_splits(s), 1);
}

// ---- launch candidates (autotuning) ------------------------------------------------------------

// Parses a tensor-core label "warps=W mtiles=M bn=N q=regs|smem[ kg=G]".
bool parse_mma_label(const std::string& label, AttnMmaTiles* t) {
  char q[8] = {};
  t->key_groups = 1;
  const int got = std::sscanf(label.c_str(), "warps=%d mtiles=%d bn=%d q=%4s kg=%d", &t->warps,
                              &t->warp_mtiles, &t->block_n, q, &t->key_groups);
  if (got != 4 && got != 5) return false;
  t->q_in_regs = std::string(q) == "regs";
  return attention_tiles_label(*t) == label;
}

// The template arguments of the attention_prefill_mma call in a kernel body.
std::vector<std::string> mma_template_args(const std::string& body) {
  std::vector<std::string> out;
  size_t at = body.find("attention_prefill_mma<");
  if (at == std::string::npos) return out;
  at += 22;
  const size_t end = body.find(">(p)", at);
  while (at < end) {
    const size_t comma = std::min(body.find(", ", at), end);
    out.push_back(body.substr(at, comma - at));
    at = comma + 2;
  }
  return out;
}

// The rules every candidate of launch `l` keeps (compiler/backend/launch_plan.h), and that its
// label names the kernel text and geometry it carries. Returns the number of candidates.
size_t expect_valid_candidates(const LoweredProgram& prog, const KernelLaunch& l) {
  const KernelDef& def = prog.kernels[static_cast<size_t>(l.kernel)];
  EXPECT_FALSE(l.config.empty());
  EXPECT_LE(l.candidates.size(), 9u);
  std::set<std::string> labels = {l.config};
  for (const LaunchCandidate& c : l.candidates) {
    SCOPED_TRACE(c.config);
    EXPECT_TRUE(labels.insert(c.config).second) << "label repeated or equal to the default's";
    EXPECT_EQ(c.config.find("  "), std::string::npos);
    EXPECT_TRUE(c.def.symbol.empty());
    EXPECT_EQ(c.def.params, def.params);
    EXPECT_NE(c.def.body, def.body);
    EXPECT_EQ(c.block, c.def.max_threads);  // as tight as the default's
    EXPECT_EQ(l.block, def.max_threads);
    EXPECT_LE(c.shared_bytes, 227u * 1024u);
    EXPECT_EQ(c.work, l.work);
    EXPECT_EQ(c.grid_y, l.grid_y);
    AttnMmaTiles t;
    if (parse_mma_label(c.config, &t)) {
      // attention_prefill_mma<T, TM, TK, D, WARPS, MT, BN, QREG, CAUSAL, MASK, KPAD[, KG]>
      const auto args = mma_template_args(c.def.body);
      if (args.size() < 8) {
        ADD_FAILURE() << c.def.body;
        continue;
      }
      EXPECT_EQ(args[4], std::to_string(t.warps));
      EXPECT_EQ(args[5], std::to_string(t.warp_mtiles));
      EXPECT_EQ(args[6], std::to_string(t.block_n));
      EXPECT_EQ(args[7], t.q_in_regs ? "true" : "false");
      EXPECT_EQ(args[3], mma_template_args(def.body).at(3));  // the head dim
      EXPECT_EQ(args.size(), t.key_groups > 1 ? 12u : 11u);
      if (t.key_groups > 1 && args.size() == 12u) {
        EXPECT_EQ(args[11], std::to_string(t.key_groups));
      }
      EXPECT_EQ(c.block, 32u * t.warps * t.key_groups);
      EXPECT_EQ(c.work_per_block, 16u * t.warp_mtiles * t.warps);
    } else {
      int warps = 0;
      EXPECT_EQ(std::sscanf(c.config.c_str(), "warps=%d", &warps), 1);
      EXPECT_EQ(c.config, fmt::format("warps={}", warps));
      EXPECT_NE(c.def.body.find("attention_prefill_simt<"), std::string::npos);
      EXPECT_EQ(c.block, 32u * warps);
      EXPECT_EQ(c.work_per_block, static_cast<uint32_t>(warps));
    }
  }
  return l.candidates.size();
}

TEST(LowerAttentionCandidates, PrefillLaunchesOfferTileShapes) {
  struct Case {
    Precision p;
    int heads, head_dim;
    const char* config;
    size_t candidates;
  };
  const Case cases[] = {
      {Precision::kF32, 4, 16, "warps=4", 2},  // SIMT: block sizes
      {Precision::kF16, 4, 16, "warps=4", 2},
      // Tensor-core: tile shapes, then 2 and 4 key groups where their registers fit.
      {Precision::kF16, 2, 64, "warps=4 mtiles=2 bn=64 q=regs", 9},
      {Precision::kBF16, 2, 80, "warps=4 mtiles=2 bn=64 q=smem", 8},
      {Precision::kF16, 2, 96, "warps=4 mtiles=2 bn=64 q=smem", 6},
      {Precision::kBF16, 2, 128, "warps=4 mtiles=2 bn=64 q=smem", 6},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} d={}", precision_name(c.p), c.head_dim));
    const Lowered l = lower_text(gpt2_block(c.heads, c.head_dim, true), c.p);
    const auto steps = attention_steps(l.prog);
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(steps[0]->config, c.config);
    EXPECT_EQ(expect_valid_candidates(l.prog, *steps[0]), c.candidates);
    // The default kernel is what codegen_attention_prefill has always emitted.
    const std::string& body = l.prog.kernels[steps[0]->kernel].body;
    AttnMmaTiles t;
    if (parse_mma_label(c.config, &t)) {
      EXPECT_EQ(t, attention_mma_tiles(c.head_dim));
      EXPECT_EQ(steps[0]->block, 128u);
      EXPECT_EQ(steps[0]->work_per_block, 128u);
      EXPECT_NE(body.find("attention_prefill_mma"), std::string::npos);
    } else {
      EXPECT_EQ(steps[0]->block, 128u);
      EXPECT_EQ(steps[0]->work_per_block, 4u);
      EXPECT_NE(body.find("attention_prefill_simt"), std::string::npos);
    }
  }
}

// Decode's split and combine launches share a partial buffer sized by the split count: untuned.
TEST(LowerAttentionCandidates, DecodeLaunchesHaveNone) {
  const std::string text = R"(<ir_version: 10, opset_import: ["" : 23]>
g (float[2, 4, 1, 64] q, float[2, 4, N, 64] k, float[2, 4, N, 64] v) => (float[2, 4, 1, 64] y) {
  y = Attention(q, k, v)
})";
  ir::Graph g = testing::import_text_ok(text, ImportOptions{"N", {}});
  ASSERT_TRUE(front_end_passes(g, 1024).ok());
  ASSERT_TRUE(precision_lower(g, Precision::kF16).ok());
  // Every run eager at its exact size (no real-size argument).
  auto prog = lower_graph(g, LowerOptions{Precision::kF16, {"attention"}, false});
  ASSERT_TRUE(prog.ok()) << prog.status().to_string();
  const auto steps = attention_steps(*prog);
  ASSERT_EQ(steps.size(), 2u);  // split keys, combine
  for (const KernelLaunch* k : steps) {
    EXPECT_TRUE(k->config.empty());
    EXPECT_TRUE(k->candidates.empty());
  }
}

TEST(LowerAttentionCandidates, TileShapesFitAndDiffer) {
  for (int64_t d : {64, 80, 96, 128}) {
    SCOPED_TRACE(d);
    const AttnMmaTiles def = attention_mma_tiles(d);
    EXPECT_TRUE(attention_mma_fits(d, def));
    const auto tiles = attention_mma_tile_candidates(d);
    EXPECT_GE(tiles.size(), 4u);
    EXPECT_LE(tiles.size(), 9u);
    std::set<std::string> labels = {attention_tiles_label(def)};
    for (const AttnMmaTiles& t : tiles) {
      EXPECT_TRUE(attention_mma_fits(d, t)) << attention_tiles_label(t);
      EXPECT_TRUE(labels.insert(attention_tiles_label(t)).second) << attention_tiles_label(t);
    }
    EXPECT_EQ(attention_mma_tile_candidates(d).size(), tiles.size());  // deterministic
  }
  // 4 warps of 2 m-tiles at D = 128 with Q in registers: 256 fragment registers, spills.
  EXPECT_FALSE(attention_mma_fits(128, {4, 2, 64, true}));
  // Shared memory: 8 warps of 1 m-tile with 256-key tiles at D = 128 needs 306 KiB (192
  // fragment registers: those fit).
  EXPECT_FALSE(attention_mma_fits(128, {8, 1, 256, false}));
  EXPECT_TRUE(attention_mma_fits(128, {8, 1, 128, false}));
  // Key groups: 4 groups of 4 warps cap a thread at 128 registers, room for D = 64's 80 fragment
  // registers but not D = 128's 128.
  EXPECT_TRUE(attention_mma_fits(64, {4, 1, 64, true, 4}));
  EXPECT_FALSE(attention_mma_fits(128, {4, 1, 64, true, 4}));
}

// The default tiles follow the grid at the largest size: at D = 64, fewer than two blocks per
// SM of 128-row blocks (batch-1 prefill of a few dozen heads) take 64-row blocks instead; the
// full-grid tiles stay a candidate.
TEST(LowerAttentionCandidates, SmallGridsDefaultToSixtyFourRowBlocks) {
  AttnSpec s = contiguous_spec(DType::kF16, 64, true, false, true, DimExpr::size());
  s.B = DimExpr::constant(1);
  s.Hq = 32;  // a Llama: 32 heads × 4 blocks of 128 rows at 512 tokens = 128 blocks
  const AttnMmaTiles large = attention_mma_tiles(64);
  EXPECT_EQ(attention_default_tiles(s), large);  // max_size unknown
  s.max_size = 512;
  AttnMmaTiles small = large;
  small.warp_mtiles = 1;
  EXPECT_EQ(attention_default_tiles(s), small);
  EXPECT_EQ(attention_prefill_config(s), "warps=4 mtiles=1 bn=64 q=regs");
  const AttnKernel k = codegen_attention_prefill(s);
  EXPECT_EQ(k.work_per_block, 64u);
  // D, warps, m-tiles, keys a tile, Q in registers, causal.
  EXPECT_NE(k.def.body.find(", 64, 4, 1, 64, true, true,"), std::string::npos) << k.def.body;
  bool large_offered = false;
  for (const LaunchCandidate& c : attention_prefill_candidates(s)) {
    EXPECT_NE(c.config, attention_prefill_config(s));
    large_offered |= c.config == attention_tiles_label(large);
  }
  EXPECT_TRUE(large_offered);
  // 2048 tokens: 512 blocks, the full-grid tiles.
  s.max_size = 2048;
  EXPECT_EQ(attention_default_tiles(s), large);
  // The batch is the size (BERT: 12 heads, 128 tokens, up to 32 sequences): 384 blocks.
  s.max_size = 32;
  s.B = DimExpr::size();
  s.Hq = 12;
  s.Sq = DimExpr::constant(128);
  EXPECT_EQ(attention_default_tiles(s), large);
  // Other head dims keep their tiles (not measured on small grids).
  s = contiguous_spec(DType::kF16, 128, true, false, false, DimExpr::size());
  s.max_size = 512;
  EXPECT_EQ(attention_default_tiles(s), attention_mma_tiles(128));
}

// A constant Sq that one default block covers: candidates with bigger blocks cannot win.
TEST(LowerAttentionCandidates, ShortConstantQueriesDropBiggerBlocks) {
  AttnSpec s = contiguous_spec(DType::kF16, 64, true, false, false, DimExpr::constant(24));
  const auto mma = attention_prefill_candidates(s);
  EXPECT_EQ(mma.size(), attention_mma_tile_candidates(64).size() - 1);  // 8 warps × 2 m-tiles
  for (const LaunchCandidate& c : mma) EXPECT_LE(c.work_per_block, 128u) << c.config;
  s = contiguous_spec(DType::kF32, 64, true, false, false, DimExpr::constant(3));
  const auto simt = attention_prefill_candidates(s);
  ASSERT_EQ(simt.size(), 1u);
  EXPECT_EQ(simt[0].config, "warps=2");
  s.Sq = DimExpr::size();
  EXPECT_EQ(attention_prefill_candidates(s).size(), 2u);
}

// Every candidate NVRTC-compiles, each once (specialised for one size): on sm_90 the f16 D = 64
// and bf16 D = 128 tiles and the f32 SIMT blocks, on sm_80 the f16 D = 96 tiles and the bf16
// SIMT blocks.
TEST(LowerAttentionCandidates, EveryCandidateCompiles) {
  struct Group {
    const char* arch;
    std::vector<std::pair<Precision, int>> models;  // (precision, head dim)
  };
  const Group groups[] = {
      {"sm_90", {{Precision::kF16, 64}, {Precision::kBF16, 128}, {Precision::kF32, 16}}},
      {"sm_80", {{Precision::kF16, 96}, {Precision::kBF16, 16}}},
  };
  for (const Group& g : groups) {
    std::vector<SizedKernel> sized;
    std::set<std::string> symbols;
    size_t expected = 0;
    for (const auto& [p, d] : g.models) {
      const Lowered l = lower_text(gpt2_block(d == 16 ? 4 : 2, d, true), p);
      for (const KernelLaunch* k : attention_steps(l.prog)) expected += k->candidates.size();
      for (SizedKernel& k : candidate_kernels(l.prog, {17}))  // other families' too: skipped
        if (k.def.symbol.starts_with("kiln_attention") && symbols.insert(k.def.symbol).second)
          sized.push_back(std::move(k));
    }
    ASSERT_EQ(sized.size(), expected) << g.arch;
    const std::string source = codegen_module_source({}, {}, sized);
    size_t entries = 0;
    for (size_t at = source.find("extern \"C\""); at != std::string::npos;
         at = source.find("extern \"C\"", at + 1))
      ++entries;
    EXPECT_EQ(entries, expected);
    auto cubin =
        nvrtc_compile(NvrtcModule{"attention_candidates", source, kernel_headers()}, g.arch);
    EXPECT_TRUE(cubin.ok()) << g.arch << ": " << cubin.status().to_string();
  }
}

}  // namespace
}  // namespace kiln::compiler

namespace kiln::compiler {
namespace {

// Exported model `name` through the front end and lowered in `precision`; `attention` gets its
// number of attention nodes.
Result<LoweredProgram> lower_exported(const std::string& name, Precision precision,
                                      int* attention = nullptr) {
  const auto dir = testing::exported_models_dir() / name;
  KILN_ASSIGN_OR_RETURN(CompileConfig cfg, config_load(dir / "kiln.yaml"));
  KILN_ASSIGN_OR_RETURN(FrontEnd fe, front_end_run(dir / "model.onnx", cfg));
  ir::Graph g = fe.graph;
  if (attention != nullptr) *attention = front_end_attention_count(g);
  return lower_graph(g, LowerOptions{precision, cfg.splitting_ops});
}

// The exported models (tests/models/exported): every kiln.Attention becomes one launch that
// reads its Q/K/V from buffers written by other steps (the view chains are absorbed).
TEST(LowerAttention, ExportedModelsAbsorbViews) {
  for (const std::string& name : testing::model_names(testing::exported_models_dir())) {
    SCOPED_TRACE(name);
    int attention = 0;
    auto prog = lower_exported(name, Precision::kF32, &attention);
    if (!prog.ok()) {  // another family's gap is not this test's business; attention's is
      EXPECT_EQ(prog.status().to_string().find("Attention"), std::string::npos)
          << prog.status().to_string();
      std::cout << name << ": not lowered: " << prog.status().to_string() << "\n";
      continue;
    }
    EXPECT_EQ(static_cast<int>(attention_steps(*prog).size()), attention);
    int transposes = 0;
    for (const auto& st : prog->steps)
      if (const auto* k = std::get_if<KernelLaunch>(&st))
        if (k->nodes.find("Transpose") != std::string::npos &&
            !prog->kernels[k->kernel].symbol.starts_with("kiln_attention"))
          ++transposes;
    std::cout << name << ": " << prog->steps.size() << " steps, " << transposes
              << " other steps naming a Transpose\n";
    if (std::getenv("ATTN_DUMP_STEPS"))
      for (const auto& st : prog->steps) {
        if (const auto* k = std::get_if<KernelLaunch>(&st))
          std::cout << "  kernel " << prog->kernels[k->kernel].symbol.substr(0, 20) << " "
                    << k->nodes.substr(0, 150) << "\n";
        else
          std::cout << "  gemm " << std::get<GemmLaunch>(st).nodes.substr(0, 150) << "\n";
      }
  }
}

// Llama-style prefill (rotary families, the exports whose K and V reach attention through views):
// one QKV GEMM (fuse_qkv sees through kiln.Rotary), one rotary launch for Q and K that reads
// their slices of the GEMM's product in place (no transposes), attention reading V there too.
// A layer, attention to attention on the cuBLASLt route: attention, O GEMM (+ residual),
// RMSNorm, gate/up GEMM, gating, down GEMM (+ residual), RMSNorm, QKV GEMM, rotary = 9 launches
// (14 before: three projections, two transposes, two rotary launches).
TEST(LowerAttention, RotaryPrefillReadsTheQkvProductInPlace) {
  // (The dynamo 23 exports' ONNX RotaryEmbedding nodes each compute their own cos/sin tables,
  // one pair after passes/cse; the dynamo 18 exports repeat K and V's heads, which
  // simplify_attention undoes.)
  for (const char* name :
       {"llama_ts17_sdpa", "llama_optimum", "mistral_ts17_eager", "qwen2_ts17_sdpa",
        "llama_dynamo23", "qwen2_dynamo23_nomask", "llama_dynamo18", "mistral_dynamo18_nomask"}) {
    SCOPED_TRACE(name);
    auto prog = lower_exported(name, Precision::kF16);
    ASSERT_TRUE(prog.ok()) << prog.status().to_string();
    std::vector<size_t> attention_at;
    int rotary = 0;
    for (size_t i = 0; i < prog->steps.size(); ++i) {
      const auto* k = std::get_if<KernelLaunch>(&prog->steps[i]);
      if (k == nullptr) continue;
      const std::string& sym = prog->kernels[k->kernel].symbol;
      if (sym.starts_with("kiln_attention")) attention_at.push_back(i);
      if (!sym.starts_with("kiln_rotary")) continue;
      ++rotary;
      // Q and K in one launch: x, cos, sin, out, out2 and the size; X is the QKV GEMM's product.
      ASSERT_EQ(k->args.size(), 6u) << k->nodes;
      const GemmLaunch* qkv = nullptr;  // the GEMM before it
      for (size_t j = i; j-- > 0 && qkv == nullptr;) qkv = std::get_if<GemmLaunch>(&prog->steps[j]);
      ASSERT_NE(qkv, nullptr);
      EXPECT_EQ(k->args[0].value, qkv->d);
    }
    ASSERT_EQ(attention_at.size(), 2u);
    EXPECT_EQ(rotary, 2) << "one rotary launch per layer";
    int layer = 0;
    for (size_t i = attention_at[0]; i < attention_at[1]; ++i) {
      const auto* k = std::get_if<KernelLaunch>(&prog->steps[i]);
      layer += k == nullptr || k->nodes.find("(skinny") == std::string::npos;
      if (k != nullptr) {
        EXPECT_FALSE(prog->kernels[k->kernel].symbol.starts_with("kiln_transpose")) << k->nodes;
      }
    }
    EXPECT_EQ(layer, 9);
  }
}

}  // namespace
}  // namespace kiln::compiler
