// Paged attention codegen (compiler/backend/lower/paged_attention_codegen): launch geometry,
// the split configuration per batch (heads per block, partition), parameters, and that every kernel
// NVRTC-compiles for sm_80 and sm_90 in f32/f16/bf16 with head dims 16, 64, 80 and 128, GQA and
// not, split and not, one query head or several per decode block.
#include "compiler/backend/lower/paged_attention_codegen.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/nvrtc_compile.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

PagedAttnSpec decode_spec(DType dtype, int64_t d, int64_t hq, int64_t hkv, int64_t partition) {
  PagedAttnSpec s;
  s.dtype = dtype;
  s.Hq = hq;
  s.Hkv = hkv;
  s.D = s.Dv = d;
  s.block_size = 16;
  s.max_blocks_per_seq = 256;  // 4096 tokens
  s.rows = DimExpr::size();
  s.q_len = DimExpr::constant(1);
  s.partition = partition;
  s.scale = 0.125f;
  paged_attn_contiguous_strides(s);
  return s;
}

bool has(const KernelDef& k, const std::string& text) {
  return k.body.find(text) != std::string::npos;
}

TEST(PagedAttentionCodegen, BatchOneConfigurationFillsTheGpu) {
  // 32 heads, one a block: 64-token partitions → 512 tokens make 8·32 = 256 blocks.
  EXPECT_EQ(paged_decode_config(decode_spec(DType::kF16, 128, 32, 8, 0), 1),
            (PagedDecodeConfig{1, 64}));
  // 8 heads: 32-token partitions, 128 blocks at 512 tokens.
  EXPECT_EQ(paged_decode_config(decode_spec(DType::kF16, 128, 8, 8, 0), 1),
            (PagedDecodeConfig{1, 32}));
  // A multiple of the block size.
  PagedAttnSpec s = decode_spec(DType::kF16, 64, 32, 8, 0);
  s.block_size = 48;
  EXPECT_EQ(paged_decode_config(s, 1).partition % 48, 0);
  // A partition that would cover max_seq_len: no split.
  s = decode_spec(DType::kF16, 64, 32, 8, 0);
  s.max_blocks_per_seq = 4;  // 64 tokens
  EXPECT_EQ(paged_decode_config(s, 1).partition, 0);
  // Batch 1 blocks = partitions of the context · Hq, at least one per SM of an H100 (132)
  // from 16 query heads up; 8 heads get 128.
  for (int64_t hq : {8, 16, 32, 64})
    for (int64_t ctx : {512, 1024, 4096}) {
      const PagedDecodeConfig c = paged_decode_config(decode_spec(DType::kF16, 128, hq, 8, 0), 1);
      ASSERT_GT(c.partition, 0);
      const int64_t blocks = (ctx + c.partition - 1) / c.partition * hq / c.group;
      EXPECT_GE(blocks, hq == 8 ? 128 : 132) << "hq=" << hq << " ctx=" << ctx;
    }
}

TEST(PagedAttentionCodegen, LargerBatchesGroupHeadsAndSplitLess) {
  // GPT-2 small (12 heads, no GQA): 12, 96, 384 and 768 blocks per position.
  const PagedAttnSpec gpt2 = decode_spec(DType::kF16, 64, 12, 12, 0);
  EXPECT_EQ(paged_decode_config(gpt2, 1), (PagedDecodeConfig{1, 32}));
  EXPECT_EQ(paged_decode_config(gpt2, 8), (PagedDecodeConfig{1, 64}));
  EXPECT_EQ(paged_decode_config(gpt2, 32), (PagedDecodeConfig{1, 0}));
  EXPECT_EQ(paged_decode_config(gpt2, 64), (PagedDecodeConfig{1, 0}));
  // A Llama (32 query heads on 8 kv heads): the 4 heads of a kv head share a block from batch 8.
  const PagedAttnSpec llama = decode_spec(DType::kF16, 64, 32, 8, 0);
  EXPECT_EQ(paged_decode_config(llama, 1), (PagedDecodeConfig{1, 64}));
  EXPECT_EQ(paged_decode_config(llama, 8), (PagedDecodeConfig{4, 64}));
  EXPECT_EQ(paged_decode_config(llama, 32), (PagedDecodeConfig{4, 256}));
  EXPECT_EQ(paged_decode_config(llama, 64), (PagedDecodeConfig{4, 0}));
  EXPECT_EQ(paged_decode_config_name({4, 64}), "group=4 partition=64");
}

TEST(PagedAttentionCodegen, SplitDecodeGeometryAndWorkspace) {
  const PagedAttnSpec s = decode_spec(DType::kF16, 128, 32, 8, 64);
  EXPECT_EQ(paged_decode_max_partitions(s), 4096 / 64);
  const AttnKernel split = codegen_paged_decode_split(s);
  EXPECT_EQ(split.work.eval(1), 64);
  EXPECT_EQ(split.grid_y.eval(3), 3 * 32);
  EXPECT_EQ(split.def.params.back(), "float* __restrict__ part");
  EXPECT_TRUE(has(split.def, "kiln::paged_decode_split<kiln::f16, 32, 8, 128, 128, 16, 64, 4, 1>"));
  const AttnKernel combine = codegen_paged_decode_combine(s);
  EXPECT_EQ(combine.work.eval(3), 3 * 32);
  EXPECT_EQ(combine.def.params.back(), "const float* __restrict__ part");
  // rows·Hq·partitions·(Dv + 2) floats.
  EXPECT_EQ(paged_decode_part_floats(s).eval(3), 3 * 32 * 64 * 130);
  // The decode reads the row's context from context_lens, the block table's stride is baked in.
  EXPECT_TRUE(has(split.def, "p.bt_stride = 256LL;"));
}

TEST(PagedAttentionCodegen, GroupedDecodeHasABlockPerKvHeadGroup) {
  PagedAttnSpec s = decode_spec(DType::kF16, 128, 32, 8, 64);
  s.decode_group = 4;
  const AttnKernel split = codegen_paged_decode_split(s);
  EXPECT_EQ(split.grid_y.eval(3), 3 * 8);
  EXPECT_TRUE(has(split.def, "kiln::paged_decode_split<kiln::f16, 32, 8, 128, 128, 16, 64, 4, 4>"));
  // The combine and the partials stay per query head.
  EXPECT_EQ(codegen_paged_decode_combine(s).work.eval(3), 3 * 32);
  EXPECT_EQ(paged_decode_part_floats(s).eval(3), 3 * 32 * 64 * 130);
}

TEST(PagedAttentionCodegen, DefaultGroupSharesAKvHeadWithinTheRegisterBudget) {
  // A lane holds a query and an output vector of 8 fp16 (16 floats) per head at head dim 64
  // and 128: the 4 query heads of a kv head fit.
  EXPECT_EQ(paged_decode_default_group(decode_spec(DType::kF16, 64, 32, 8, 0)), 4);
  EXPECT_EQ(paged_decode_default_group(decode_spec(DType::kF16, 128, 32, 8, 0)), 4);
  EXPECT_EQ(paged_decode_default_group(decode_spec(DType::kF32, 64, 32, 8, 0)), 4);
  // 8 heads of a kv head: 4 of them a block (two blocks read each row).
  EXPECT_EQ(paged_decode_default_group(decode_spec(DType::kBF16, 128, 64, 8, 0)), 4);
  // Without GQA, and where no divisor but 1 fits (7 heads of a kv head).
  EXPECT_EQ(paged_decode_default_group(decode_spec(DType::kF16, 64, 12, 12, 0)), 1);
  EXPECT_EQ(paged_decode_default_group(decode_spec(DType::kF16, 128, 28, 4, 0)), 1);
}

TEST(PagedAttentionCodegen, UnsplitDecodeIsOneLaunchWithoutWorkspace) {
  PagedAttnSpec s = decode_spec(DType::kF32, 64, 4, 4, 0);
  EXPECT_EQ(paged_decode_max_partitions(s), 1);
  const AttnKernel k = codegen_paged_decode_split(s);
  EXPECT_EQ(k.work.eval(5), 1);
  EXPECT_EQ(k.def.params.size(), 6u);
  EXPECT_TRUE(has(k.def, "(p, nullptr, 1)"));
  // Its combine is never launched (no blocks).
  EXPECT_EQ(codegen_paged_decode_combine(s).work.eval(5), 0);
  // Beside split configurations of the same launch: the same parameters, the partials unused.
  s.decode_workspace = true;
  const AttnKernel w = codegen_paged_decode_split(s);
  EXPECT_EQ(w.def.params.back(), "float* __restrict__ part");
  EXPECT_TRUE(has(w.def, "(p, part, 1)"));
}

// With decode_fresh the split kernel appends itself (the decode route's kernel): the caches
// become writable, and k, v and slot_mapping follow the other parameters, k and v at their
// offsets and strides in the QKV buffer.
TEST(PagedAttentionCodegen, FreshSplitTakesTheNewKeysAndValues) {
  PagedAttnSpec s = decode_spec(DType::kF16, 64, 8, 2, 64);
  s.k_st = s.v_st = DimExpr::constant(12 * 64);
  s.k_off = DimExpr::constant(8 * 64);
  s.v_off = DimExpr::constant(10 * 64);
  const AttnKernel plain = codegen_paged_decode_split(s);
  s.decode_fresh = true;
  const AttnKernel k = codegen_paged_decode_split(s);
  ASSERT_EQ(k.def.params.size(), plain.def.params.size() + 3);
  EXPECT_EQ(k.def.params[1], "kiln::f16* __restrict__ key_cache");
  EXPECT_EQ(k.def.params[2], "kiln::f16* __restrict__ value_cache");
  EXPECT_EQ(plain.def.params[1], "const kiln::f16* __restrict__ key_cache");
  const size_t n = k.def.params.size();
  EXPECT_EQ(k.def.params[n - 4], "float* __restrict__ part");
  EXPECT_EQ(k.def.params[n - 3], "const kiln::f16* k");
  EXPECT_EQ(k.def.params[n - 1], "const long long* __restrict__ slot_mapping");
  // Only the decode route's instantiation: no code of the plain kernel's in it.
  EXPECT_TRUE(has(k.def,
                  "  kiln::paged_decode_split<kiln::f16, 8, 2, 64, 64, 16, 64, 4, 1, 0, 0, "
                  "true>(p, part, 64);\n"));
  EXPECT_TRUE(has(plain.def,
                  "  kiln::paged_decode_split<kiln::f16, 8, 2, 64, 64, 16, 64, 4, "
                  "1>(p, part, 64);\n"));
  EXPECT_EQ(k.def.body.find("decode_route"), std::string::npos);
  // The decode route's kernel enters after its first loads.
  EXPECT_TRUE(k.def.enters_itself);
  EXPECT_FALSE(plain.def.enters_itself);
  EXPECT_TRUE(has(k.def, "p.k_new = (k + 512LL);"));
  EXPECT_TRUE(has(k.def, "p.v_st = 768LL;"));
  EXPECT_TRUE(has(k.def, "p.key_out = key_cache;"));
  // Same geometry; the combine's parameters do not change.
  EXPECT_EQ(k.grid_y.eval(3), plain.grid_y.eval(3));
  EXPECT_EQ(codegen_paged_decode_combine(s).def.params, [&] {
    s.decode_fresh = false;
    return codegen_paged_decode_combine(s).def.params;
  }());
}

TEST(PagedAttentionCodegen, AppendCoversEveryNewTokenHeadAndDim) {
  PagedAttnSpec s = decode_spec(DType::kBF16, 80, 8, 2, 0);
  s.rows = DimExpr::constant(4);
  s.q_len = DimExpr::size();
  // A fused QKV row: [q (8 heads), k (2), v (2)] · 80.
  s.k_st = s.v_st = DimExpr::constant(12 * 80);
  const AttnKernel k = codegen_paged_kv_append(s);
  EXPECT_EQ(k.work.eval(3), 4 * 3 * 2 * 80);
  EXPECT_TRUE(has(k.def, "kiln::paged_kv_append<kiln::bf16, 2, 80, 80, 16>(k, 960LL, 80LL, v, "
                         "960LL, 80LL, slot_mapping, (4LL*S)"));
  EXPECT_EQ(k.def.params[2], "const long long* __restrict__ slot_mapping");
}

TEST(PagedAttentionCodegen, PrefillIsAWarpPerQueryRow) {
  PagedAttnSpec s = decode_spec(DType::kF16, 64, 8, 2, 0);
  s.rows = DimExpr::constant(2);
  s.q_len = DimExpr::size();
  paged_attn_contiguous_strides(s);
  const AttnKernel k = codegen_paged_prefill(s);
  EXPECT_EQ(k.work.eval(37), 37);
  EXPECT_EQ(k.work_per_block * 32, k.block);
  EXPECT_EQ(k.grid_y.eval(37), 16);
  EXPECT_EQ(k.shared_bytes, k.work_per_block * 64 * 4);
  EXPECT_TRUE(has(k.def, "p.q_sb = (512LL*S);"));
}

// Every kernel of a spec, named for one module.
std::vector<KernelDef> kernels_of(const PagedAttnSpec& s, const std::string& name) {
  std::vector<KernelDef> out;
  for (AttnKernel k : {codegen_paged_kv_append(s), codegen_paged_decode_split(s),
                       codegen_paged_decode_combine(s), codegen_paged_prefill(s)}) {
    k.def.symbol = name + "_" + std::to_string(out.size());
    out.push_back(k.def);
  }
  return out;
}

TEST(PagedAttentionCodegen, CompilesWithNvrtcInEveryDtypeAndHeadDim) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<KernelDef> defs;
    struct Shape {
      int64_t d, dv, hq, hkv, partition, group;
      bool fresh;  // decode_fresh
    };
    const Shape shapes[] = {{16, 16, 4, 4, 0, 1, false},   {16, 32, 8, 2, 32, 4, true},
                            {64, 64, 8, 2, 64, 4, true},   {64, 64, 4, 4, 0, 1, true},
                            {80, 80, 8, 2, 128, 2, false}, {128, 128, 32, 8, 64, 4, true},
                            {128, 128, 4, 4, 0, 1, false}};
    for (const Shape& sh : shapes) {
      PagedAttnSpec s = decode_spec(t, sh.d, sh.hq, sh.hkv, sh.partition);
      s.Dv = sh.dv;
      s.decode_group = sh.group;
      s.decode_fresh = sh.fresh;
      paged_attn_contiguous_strides(s);
      const std::string name = "paged_d" + std::to_string(sh.d) + "_" +
                               std::to_string(defs.size());
      for (KernelDef& k : kernels_of(s, name)) defs.push_back(std::move(k));
    }
    const std::string source = codegen_module_source(defs, {1, 8});
    for (const char* arch : {"sm_80", "sm_90"}) {
      auto cubin = nvrtc_compile(NvrtcModule{"paged_attention", source, kernel_headers()}, arch);
      EXPECT_TRUE(cubin.ok()) << dtype_name(t) << " " << arch << ": "
                              << cubin.status().to_string();
    }
  }
}

TEST(PagedAttentionCodegen, Deterministic) {
  const PagedAttnSpec s = decode_spec(DType::kF16, 128, 32, 8, 64);
  EXPECT_EQ(codegen_paged_decode_split(s).def.body, codegen_paged_decode_split(s).def.body);
  EXPECT_EQ(codegen_paged_prefill(s).def.body, codegen_paged_prefill(s).def.body);
}

}  // namespace
}  // namespace kiln::compiler
