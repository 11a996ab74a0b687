// Attention whose keys run over the size axis, with runs padded to a captured size: when the
// lowering binds the request's real size (attention_needs_real_size), the launch arguments it
// emits (the real-size pointer after the tensors, before a decode's partial buffer and S), the
// kernel text that reads it, that those kernels NVRTC-compile for sm_80 and sm_90 (SIMT,
// tensor-core, decode), and that the exported encoders without an attention mask now compile
// into artifacts whose manifests carry the binding and pass the runtime's validation.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <variant>
#include <vector>

#include "cache/manifest_io.h"
#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/config.h"
#include "compiler/frontend/front_end.h"
#include "compiler/passes/precision.h"
#include "compiler/pipeline.h"
#include "runtime/manifest_validate.h"
#include "tests/support/ir_harness.h"
#include "tests/support/temp_dir.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;
using Kind = KernelArgRef::Kind;

// Self-attention over N queries and keys, 4 query heads sharing 2 key/value heads of `d`.
std::string self_attention(bool causal, int d = 16) {
  return fmt::format(R"(<ir_version: 10, opset_import: ["" : 23]>
g (float[2, 4, N, {0}] q, float[2, 2, N, {0}] k, float[2, 2, N, {0}] v)
    => (float[2, 4, N, {0}] y) {{
  y = Attention<is_causal = {1}>(q, k, v)
}})",
                     d, causal ? 1 : 0);
}

// One query row over N keys (decode).
const char* kDecode = R"(<ir_version: 10, opset_import: ["" : 23]>
g (float[2, 4, 1, 64] q, float[2, 4, N, 64] k, float[2, 4, N, 64] v) => (float[2, 4, 1, 64] y) {
  y = Attention(q, k, v)
})";

// Non-causal over N keys with a key-padding mask from an int input [2, N].
const char* kKeyPadding = R"(<ir_version: 10, opset_import: ["" : 23]>
g (float[2, 4, N, 16] q, float[2, 4, N, 16] k, float[2, 4, N, 16] v, int64[2, N] am)
    => (float[2, 4, N, 16] y) {
  amb = Cast<to = 9>(am)
  axes = Constant<value_ints = [1, 2]>()
  m = Unsqueeze(amb, axes)
  y = Attention(q, k, v, m)
})";

LoweredProgram lower_ok(const std::string& text, Precision precision, bool padded_runs) {
  ir::Graph g = testing::import_text_ok(text, ImportOptions{"N", {}});
  Status s = front_end_passes(g, 1024);
  EXPECT_TRUE(s.ok()) << s.to_string();
  s = precision_lower(g, precision);
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto prog = lower_graph(g, LowerOptions{precision, {"attention"}, padded_runs});
  EXPECT_TRUE(prog.ok()) << prog.status().to_string();
  return prog.ok() ? std::move(*prog) : LoweredProgram{};
}

std::vector<const KernelLaunch*> attention_launches(const LoweredProgram& prog) {
  std::vector<const KernelLaunch*> out;
  for (const LaunchStep& st : prog.steps)
    if (const auto* k = std::get_if<KernelLaunch>(&st))
      if (prog.kernels[k->kernel].symbol.starts_with("kiln_attention")) out.push_back(k);
  return out;
}

int real_size_args(const KernelLaunch& l) {
  int n = 0;
  for (const KernelArgRef& a : l.args) n += a.kind == Kind::kRealSize;
  return n;
}

bool has(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

void expect_compiles(const std::vector<KernelDef>& kernels, const std::string& what) {
  NvrtcModule m{"attention_real_size_test", codegen_module_source(kernels, {8}), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    EXPECT_TRUE(cubin.ok()) << what << " " << arch << ": " << cubin.status().to_string();
  }
}

AttnSpec spec(DType t, int64_t d, bool causal, DimExpr sq, DimExpr skv) {
  AttnSpec s;
  s.dtype = t;
  s.B = DimExpr::constant(2);
  s.Hq = 4;
  s.Hkv = 2;
  s.D = s.Dv = d;
  s.Sq = sq;
  s.Skv = skv;
  s.causal = causal;
  s.scale = 0.125f;
  s.q = s.o = attn_view_contiguous({s.B, DimExpr::constant(4), sq, DimExpr::constant(d)});
  s.k = s.v = attn_view_contiguous({s.B, DimExpr::constant(2), skv, DimExpr::constant(d)});
  return s;
}

TEST(AttentionRealSize, DecisionCoversEveryPaddingHazard) {
  const DimExpr S = DimExpr::size(), c24 = DimExpr::constant(24), c4 = DimExpr::constant(4);
  struct Case {
    const char* what;
    AttnSpec s;
    bool kpad;
    bool want;
  };
  const Case cases[] = {
      {"non-causal, keys S", spec(DType::kF32, 16, false, S, S), false, true},
      {"non-causal, keys S + 3", spec(DType::kF32, 16, false, S, {1, 3}), false, true},
      {"non-causal, keys 2S, one query", spec(DType::kF32, 16, false, {0, 1}, {2, 0}), false, true},
      {"non-causal, keys S, key padding", spec(DType::kF32, 16, false, S, S), true, false},
      {"non-causal, constant keys", spec(DType::kF32, 16, false, S, c24), false, false},
      {"causal, Sq = Skv = S", spec(DType::kF32, 16, true, S, S), false, false},
      {"causal, keys S + 8 (constant offset)", spec(DType::kF32, 16, true, S, {1, 8}), false,
       false},
      {"causal, 4 queries over S keys", spec(DType::kF32, 16, true, c4, S), false, true},
      {"causal, 4 queries over S keys, key padding", spec(DType::kF32, 16, true, c4, S), true,
       true},
      {"causal, S queries over 24 keys", spec(DType::kF32, 16, true, S, c24), false, true},
  };
  for (Case c : cases) {
    c.s.has_kpad = c.kpad;
    EXPECT_EQ(attention_needs_real_size(c.s, true), c.want) << c.what;
    EXPECT_FALSE(attention_needs_real_size(c.s, false)) << c.what << " (every run exact)";
  }
}

// The case the lowering used to refuse ("non-causal attention over the size dimension without
// a key-padding input"): now one launch that also takes the real-size pointer.
TEST(AttentionRealSize, NonCausalKeysOverTheSizeBindTheRealSize) {
  for (Precision p : {Precision::kF32, Precision::kF16}) {
    SCOPED_TRACE(std::string(precision_name(p)));
    const LoweredProgram prog = lower_ok(self_attention(false, p == Precision::kF16 ? 64 : 16), p, true);
    const auto steps = attention_launches(prog);
    ASSERT_EQ(steps.size(), 1u);
    const KernelLaunch& l = *steps[0];
    ASSERT_EQ(l.args.size(), 6u);  // q, k, v, o, real size, S
    EXPECT_EQ(l.args[4].kind, Kind::kRealSize);
    EXPECT_EQ(l.args[5].kind, Kind::kSize);
    const KernelDef& def = prog.kernels[l.kernel];
    ASSERT_EQ(def.params.size(), 5u);
    EXPECT_EQ(def.params[4], "const long long* __restrict__ real_size");
    EXPECT_TRUE(has(def.body, "const long long real_s = *real_size;")) << def.body;
    EXPECT_TRUE(has(def.body, "p.q_len = kiln::attn_real_len(1LL, 0LL, real_s, p.Sq);"));
    EXPECT_TRUE(has(def.body, "p.kv_len = kiln::attn_real_len(1LL, 0LL, real_s, p.Skv);"));
    EXPECT_EQ(has(def.body, "attention_prefill_mma"), p == Precision::kF16) << def.body;
    // The autotuner's alternatives take the same arguments, so they read it too.
    ASSERT_FALSE(l.candidates.empty());
    for (const LaunchCandidate& c : l.candidates) {
      EXPECT_EQ(c.def.params, def.params) << c.config;
      EXPECT_TRUE(has(c.def.body, "p.kv_len = kiln::attn_real_len(")) << c.config;
    }
    expect_compiles(prog.kernels, "self-attention");
  }
}

TEST(AttentionRealSize, ExactRunsAndSafeMasksDoNotReadIt) {
  struct Case {
    const char* what;
    std::string text;
    bool padded;
  };
  const Case cases[] = {
      {"non-causal, every run exact", self_attention(false), false},
      {"causal self-attention, padded", self_attention(true), true},
      {"key padding input, padded", kKeyPadding, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const LoweredProgram prog = lower_ok(c.text, Precision::kF32, c.padded);
    const auto steps = attention_launches(prog);
    ASSERT_EQ(steps.size(), 1u);
    EXPECT_EQ(real_size_args(*steps[0]), 0);
    const std::string& body = prog.kernels[steps[0]->kernel].body;
    EXPECT_TRUE(has(body, "p.q_len = p.Sq;\n  p.kv_len = p.Skv;")) << body;
    EXPECT_FALSE(has(body, "real_size")) << body;
  }
}

TEST(AttentionRealSize, DecodeSplitAndCombineBothTakeIt) {
  const LoweredProgram prog = lower_ok(kDecode, Precision::kF16, true);
  const auto steps = attention_launches(prog);
  ASSERT_EQ(steps.size(), 2u);  // split keys, combine
  for (const KernelLaunch* l : steps) {
    ASSERT_EQ(l->args.size(), 7u);  // q, k, v, o, real size, partials, S
    EXPECT_EQ(l->args[4].kind, Kind::kRealSize);
    EXPECT_EQ(l->args[5].kind, Kind::kValue);
    EXPECT_EQ(l->args[6].kind, Kind::kSize);
    const KernelDef& def = prog.kernels[l->kernel];
    EXPECT_EQ(def.params[4], "const long long* __restrict__ real_size");
    EXPECT_TRUE(has(def.params[5], "part")) << def.params[5];
  }
  EXPECT_TRUE(has(prog.kernels[steps[0]->kernel].body, "attention_decode_split"));
  expect_compiles(prog.kernels, "decode");
}

// A causal diagonal that moves with S (a constant query count over S keys; S queries over
// constant keys): the kernels place it from the real sizes. Spec level: the ONNX front end
// admits causal attention only with Sq == Skv.
TEST(AttentionRealSize, MovingCausalDiagonalCompilesOnEveryPath) {
  std::vector<KernelDef> defs;
  auto add = [&](AttnKernel k) {
    k.def.symbol = fmt::format("real_size_{}", defs.size());
    defs.push_back(std::move(k.def));
  };
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (int64_t d : {16, 64}) {
      AttnSpec s = spec(t, d, true, DimExpr::constant(4), DimExpr::size());
      s.real_size = attention_needs_real_size(s, true);
      ASSERT_TRUE(s.real_size);
      const AttnKernel k = codegen_attention_prefill(s);
      EXPECT_TRUE(has(k.def.body, "p.q_len = kiln::attn_real_len(0LL, 4LL, real_s, p.Sq);"));
      EXPECT_TRUE(has(k.def.body, "p.kv_len = kiln::attn_real_len(1LL, 0LL, real_s, p.Skv);"));
      add(k);
      AttnSpec one = spec(t, d, true, DimExpr::constant(1), DimExpr{1, 2});
      one.real_size = true;
      add(codegen_attention_decode_split(one, 1));
      add(codegen_attention_decode_split(one, 4));
      add(codegen_attention_decode_combine(one, 4));
    }
  expect_compiles(defs, "moving causal diagonal");
}

// The exported encoders without an attention mask input (size = sequence) compile end to end
// without a GPU: every attention launch binds the real size, and the manifest passes the
// runtime's validation with one real_size_ptr argument per attention kernel step.
TEST(AttentionRealSize, ExportedEncodersWithoutMaskCompile) {
  for (const char* name : {"bert_ts17_eager_nomask", "distilbert_dynamo23_nomask"}) {
    SCOPED_TRACE(name);
    const auto dir = testing::exported_models_dir() / name;
    auto cfg = config_load(dir / "kiln.yaml");
    ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
    cfg->autotune = AutotuneMode::kOff;
    testing::TempDir tmp;
    auto out = compile_model({dir / "model.onnx", *cfg, tmp.path()});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto m = cache::manifest_read(out->artifact_dir / cache::kManifestFileName);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    Status valid = runtime::manifest_validate(*m);
    EXPECT_TRUE(valid.ok()) << valid.to_string();
    int attention = 0, bound = 0;
    for (const auto& piece : m->pieces())
      for (const auto& step : piece.steps()) {
        if (!step.has_kernel()) continue;
        const auto& k = step.kernel();
        const bool is_attention =
            m->kernels(static_cast<int>(k.kernel())).symbol().starts_with("kiln_attention");
        int n = 0;
        for (const auto& a : k.args()) n += a.value_case() == schema::KernelArg::kRealSizePtr;
        attention += is_attention;
        bound += n;
        EXPECT_EQ(n, is_attention ? 1 : 0) << k.node();
      }
    EXPECT_EQ(attention, 2);  // two layers
    EXPECT_EQ(bound, attention);
  }
}

}  // namespace
}  // namespace kiln::compiler
