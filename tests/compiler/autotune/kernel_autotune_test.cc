// Launch-configuration autotuning without a GPU (compiler/autotune/kernel_autotune): database
// hits choose candidates by name, stale names keep the default, forcing, the bench module
// NVRTC-compiles, tuned candidates become size-only kernels of the module, the artifact's
// TunedLaunch entries, and which launches are tuned first. The timing itself is
// kernel_autotune_gpu_test.
#include "compiler/autotune/kernel_autotune.h"

#include <gtest/gtest.h>

#include "compiler/autotune/tuning_db.h"
#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "tests/compiler/autotune/kernel_program.h"
#include "tests/support/temp_dir.h"

namespace kiln::compiler {
namespace {

using testing::scale_program;

AutotuneOptions db_only(const std::filesystem::path& db) {
  AutotuneOptions o;
  o.tuning_db = db;
  o.budget_s = 0;  // never time: only the database decides
  return o;
}

void write_db(const std::filesystem::path& path,
              const std::vector<std::pair<int64_t, std::string>>& decisions,
              const std::string& arch = "sm_90") {
  TuningDb db;
  for (const auto& [size, config] : decisions)
    db.put(KernelTuningKey{arch, "kiln_test_scale_0123456789abcdef", size},
           KernelTuningEntry{config, 0.01, 0.02});
  ASSERT_TRUE(db.save(path).ok());
}

// The tuner fills an attention's key padding with ones (every key kept), not with the zeros other
// integer operands get: zeros would exclude every key, and the candidates would be timed on rows
// that see nothing. A value passed twice is one operand.
TEST(KernelAutotune, KeyPaddingOperandsAreOnes) {
  AttnSpec s;  // fp16, batch 1, 2 heads, S queries and keys, head dim 64, int64 key padding
  s.B = ir::DimExpr::constant(1);
  s.Hq = s.Hkv = 2;
  s.Sq = s.Skv = ir::DimExpr::size();
  s.q = s.k = s.v = s.o =
      attn_view_contiguous({s.B, ir::DimExpr::constant(2), s.Sq, ir::DimExpr::constant(64)});
  s.has_kpad = true;
  s.kpad_dtype = DType::kI64;
  s.kpad_sb = ir::DimExpr::size();
  const KernelDef def = codegen_attention_prefill(s).def;
  ASSERT_EQ(def.params.size(), 5u);  // q, k, v, o, kpad
  KernelLaunch l;
  l.args = {KernelArgRef::tensor(4), KernelArgRef::tensor(4), KernelArgRef::tensor(4),
            KernelArgRef::tensor(5), KernelArgRef::tensor(6), KernelArgRef::size()};
  const std::vector<LaunchOperand> ops = launch_operands(def, l);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].value, 4);
  EXPECT_FALSE(ops[0].ones);
  EXPECT_EQ(ops[1].value, 5);
  EXPECT_FALSE(ops[1].ones);
  EXPECT_EQ(ops[2].value, 6);
  EXPECT_TRUE(ops[2].ones);
  // Without key padding nothing is ones.
  s.has_kpad = false;
  l.args.erase(l.args.begin() + 4);
  for (const LaunchOperand& o : launch_operands(codegen_attention_prefill(s).def, l))
    EXPECT_FALSE(o.ones) << o.value;
}

TEST(KernelAutotune, OffDecidesNothing) {
  auto p = scale_program();
  AutotuneOptions o;
  o.mode = AutotuneMode::kOff;
  KernelAutotuneReport r;
  ASSERT_TRUE(autotune_kernels(o, p.graph, {16}, {"sm_90"}, p.program, &r).ok());
  EXPECT_TRUE(p.launch().tuned.empty());
  EXPECT_EQ(r.skipped, "autotune is off");
}

TEST(KernelAutotune, DatabaseChoosesCandidatesByName) {
  ::kiln::testing::TempDir dir;
  const auto path = dir.path() / "t.db";
  // Size 16: a candidate; size 64: the default's own name; size 1: a name no longer offered;
  // size 8: not in the database.
  write_db(path, {{16, "block=128"}, {64, "block=256"}, {1, "block=999"}});
  auto p = scale_program();
  KernelAutotuneReport r;
  Status st = autotune_kernels(db_only(path), p.graph, {1, 8, 16, 64}, {"sm_90"}, p.program, &r);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(r.decisions, 4);
  EXPECT_EQ(r.from_db, 3);
  EXPECT_EQ(r.timed, 0);
  const auto& tuned = p.launch().tuned;
  ASSERT_EQ(tuned.count(16), 1u);
  EXPECT_EQ(tuned.at(16).candidate, 0);
  EXPECT_EQ(tuned.at(16).source, "tuning-db");
  EXPECT_DOUBLE_EQ(tuned.at(16).ms, 0.01);
  ASSERT_EQ(tuned.count(64), 1u);
  EXPECT_EQ(tuned.at(64).candidate, -1);
  EXPECT_EQ(tuned.count(1), 0u) << "a stale name keeps the default";
  EXPECT_EQ(tuned.count(8), 0u);
}

TEST(KernelAutotune, DatabaseOfAnotherArchDoesNotApply) {
  ::kiln::testing::TempDir dir;
  const auto path = dir.path() / "t.db";
  write_db(path, {{16, "block=128"}}, "sm_80");
  auto p = scale_program();
  ASSERT_TRUE(autotune_kernels(db_only(path), p.graph, {16}, {"sm_90"}, p.program).ok());
  EXPECT_TRUE(p.launch().tuned.empty());
}

TEST(KernelAutotune, OnWithoutAGpuIsAnError) {
  std::string why;
  if (cudaFree(nullptr) == cudaSuccess) GTEST_SKIP() << "a GPU is present";
  (void)cudaGetLastError();
  auto p = scale_program();
  AutotuneOptions o;
  o.mode = AutotuneMode::kOn;
  Status st = autotune_kernels(o, p.graph, {16}, {"sm_90"}, p.program);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot time kernels"), std::string::npos) << st.message();
}

TEST(KernelAutotune, ForceChoosesCandidateNWhereItExists) {
  auto p = scale_program();
  EXPECT_EQ(force_kernel_candidate(p.program, {4, 32}, 1), 1);
  ASSERT_EQ(p.launch().tuned.size(), 2u);
  EXPECT_EQ(p.launch().tuned.at(32).candidate, 1);
  EXPECT_EQ(p.launch().tuned.at(32).source, "forced");
  auto q = scale_program();
  EXPECT_EQ(force_kernel_candidate(q.program, {4}, 3), 0);  // only 3 candidates
  EXPECT_TRUE(q.launch().tuned.empty());
}

TEST(KernelAutotune, TunedCandidatesBecomeSizeOnlyKernels) {
  auto p = scale_program();
  p.launch().tuned[16] = TunedChoice{0, "forced"};
  p.launch().tuned[64] = TunedChoice{-1, "autotune"};  // the default kept: no extra kernel
  p.launch().tuned[128] = TunedChoice{0, "forced"};
  const auto sized = tuned_kernels(p.program);
  ASSERT_EQ(sized.size(), 1u);
  EXPECT_EQ(sized[0].sizes, (std::vector<int64_t>{16, 128}));
  const std::string symbol = candidate_symbol(p.program.kernels[0], p.launch().candidates[0]);
  EXPECT_EQ(sized[0].def.symbol, symbol);
  EXPECT_EQ(symbol.rfind("kiln_test_scale_0123456789abcdef_v", 0), 0u) << symbol;
  const std::string src = codegen_module_source(p.program.kernels, {16}, sized);
  EXPECT_NE(src.find(specialised_symbol(symbol, 16) + "("), std::string::npos);
  EXPECT_NE(src.find(specialised_symbol(symbol, 128) + "("), std::string::npos);
  EXPECT_EQ(src.find(symbol + "("), std::string::npos) << "no general entry for a candidate";
  // A candidate's symbol depends only on its code.
  auto q = scale_program();
  EXPECT_EQ(candidate_symbol(q.program.kernels[0], q.launch().candidates[0]), symbol);
  EXPECT_NE(candidate_symbol(q.program.kernels[0], q.launch().candidates[1]), symbol);
}

TEST(KernelAutotune, BenchModuleCompilesForEveryArch) {
  auto p = scale_program();
  NvrtcModule m{"bench", launch_bench_source(p.program, p.launch(), {3, 17}), kernel_headers()};
  for (const char* arch : {"sm_80", "sm_90"}) {
    auto cubin = nvrtc_compile(m, arch);
    ASSERT_TRUE(cubin.ok()) << arch << ": " << cubin.status().to_string();
    EXPECT_GT(cubin->size(), 0u);
  }
}

// The (launch, size) pairs tuned in the first round: a skinny GEMM kernel (gated to its sizes),
// and the norm and gating kernels that run only beside cuBLASLt, at the sizes where some skinny
// kernel may run; at another size (a prefill's 128 rows) and for a plain launch, the second.
TEST(KernelAutotune, SkinnyNormAndGatingLaunchesDecideTheRoute) {
  LoweredProgram program;
  KernelLaunch skinny;
  skinny.run_sizes = std::vector<int64_t>{2, 4};
  KernelLaunch other_skinny;
  other_skinny.run_sizes = std::vector<int64_t>{1, 2};
  KernelLaunch norm;
  norm.before_cublaslt = true;
  KernelLaunch gating;
  gating.after_cublaslt = true;
  KernelLaunch plain;
  for (const KernelLaunch& l : {skinny, norm, other_skinny, gating, plain})
    program.steps.emplace_back(l);
  const std::vector<int64_t> route_sizes = route_decision_sizes(program);
  EXPECT_EQ(route_sizes, (std::vector<int64_t>{1, 2, 4}));
  for (int64_t s : {1, 2, 4}) {
    EXPECT_TRUE(launch_decides_route(norm, s, route_sizes)) << s;
    EXPECT_TRUE(launch_decides_route(gating, s, route_sizes)) << s;
    EXPECT_FALSE(launch_decides_route(plain, s, route_sizes)) << s;
  }
  EXPECT_TRUE(launch_decides_route(skinny, 4, route_sizes));
  for (int64_t s : {3, 128}) {
    EXPECT_FALSE(launch_decides_route(norm, s, route_sizes)) << s;
    EXPECT_FALSE(launch_decides_route(gating, s, route_sizes)) << s;
  }
  EXPECT_FALSE(launch_decides_route(scale_program().launch(), 1, route_sizes));
  EXPECT_TRUE(route_decision_sizes(scale_program().program).empty());
}

}  // namespace
}  // namespace kiln::compiler
