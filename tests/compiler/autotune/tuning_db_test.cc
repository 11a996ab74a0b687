// The GEMM tuning database (compiler/autotune/tuning_db): round trip through a file, atomic
// save, and malformed files rejected with "file:line" and the offending field. Also autotune's
// CPU behaviour: off does nothing; without a GPU a database hit still fills GemmStep.algos.
#include "compiler/autotune/tuning_db.h"

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "compiler/autotune/autotune.h"
#include "tests/support/temp_dir.h"

namespace kiln::compiler {
namespace {

TuningKey sample_key(int64_t m) {
  TuningKey k;
  k.arch = "sm_90";
  k.cublaslt_version = 130001;
  k.compute = "F16";
  k.epilogue = "BIAS_GELU";
  k.trans_b = true;
  k.has_c = true;
  k.m = m;
  k.n = 3072;
  k.k = 768;
  return k;
}

TuningEntry sample_entry(int32_t id) {
  TuningEntry e;
  e.algo.set_algo_id(id);
  e.algo.set_tile(20);
  e.algo.set_stages(19);
  e.algo.set_split_k(2);
  e.algo.set_reduction_scheme(1);
  e.algo.set_cta_swizzle(1);
  e.algo.set_custom_option(3);
  e.algo.set_cluster_shape(2);
  e.algo.set_inner_shape(5);
  e.algo.set_workspace_bytes(1 << 20);
  e.ms = 0.0123;
  e.heuristic_ms = 0.015;
  return e;
}

void expect_same(const TuningEntry& a, const TuningEntry& b) {
  EXPECT_EQ(a.algo.SerializeAsString(), b.algo.SerializeAsString())
      << a.algo.DebugString() << " vs " << b.algo.DebugString();
  EXPECT_NEAR(a.ms, b.ms, 1e-9);
  EXPECT_NEAR(a.heuristic_ms, b.heuristic_ms, 1e-9);
}

TEST(TuningDb, RoundTripThroughAFile) {
  testing::TempDir dir;
  const auto path = dir.path() / "tune.db";
  TuningDb db;
  db.put(sample_key(1024), sample_entry(66));
  db.put(sample_key(1), sample_entry(21));
  db.put(sample_key(1), sample_entry(22));  // replaces
  ASSERT_EQ(db.size(), 2u);
  ASSERT_TRUE(db.save(path).ok());

  auto loaded = TuningDb::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->size(), 2u);
  ASSERT_NE(loaded->find(sample_key(1024)), nullptr);
  expect_same(*loaded->find(sample_key(1024)), sample_entry(66));
  ASSERT_NE(loaded->find(sample_key(1)), nullptr);
  expect_same(*loaded->find(sample_key(1)), sample_entry(22));
  TuningKey other = sample_key(1);
  other.arch = "sm_80";
  EXPECT_EQ(loaded->find(other), nullptr);
  other = sample_key(1);
  other.has_c = false;
  EXPECT_EQ(loaded->find(other), nullptr);
  // Nothing but the database is left in the folder (the temporary file was renamed).
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) files += e.exists();
  EXPECT_EQ(files, 1);
}

TEST(TuningDb, MissingFileIsEmptyAndCommentsAreSkipped) {
  testing::TempDir dir;
  auto none = TuningDb::load(dir.path() / "absent.db");
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->size(), 0u);
  testing::write_bytes(
      dir.path() / "c.db",
      "# a comment\n\n" + TuningDb::format_line(sample_key(5), sample_entry(3)) + "\r\n");
  auto one = TuningDb::load(dir.path() / "c.db");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(one->size(), 1u);
}

TEST(TuningDb, MalformedLinesNameFileLineAndField) {
  const std::string good = TuningDb::format_line(sample_key(7), sample_entry(9));
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  struct Case {
    std::string line, expect;
  };
  const Case cases[] = {
      {replace(" | ", " "), "one '|'"},
      {replace("m=7 ", "m=x7 "), "field 'm'"},
      {replace("m=7 ", "m=0 "), "field 'm'"},
      {replace("m=7 ", ""), "'m' is missing"},
      {replace("m=7 ", "m=7 m=8 "), "appears twice"},
      {replace("tile=20", "tile=20 colour=blue"), "unknown field 'colour'"},
      {replace("ms=0.0123", "ms=-1"), "field 'ms'"},
      {replace("trans_a=0", "trans_a=2"), "field 'trans_a'"},
      {replace("algo_id=9", "algo_id"), "not key=value"},
      {replace("arch=sm_90", "arch=sm/90"), "plain word"},
      {replace("split_k=2", "split_k=99999999999"), "field 'split_k'"},
  };
  testing::TempDir dir;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    const auto path = dir.path() / "bad.db";
    testing::write_bytes(path, "# header\n" + good + "\n" + c.line + "\n");
    auto db = TuningDb::load(path);
    ASSERT_FALSE(db.ok());
    EXPECT_EQ(db.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(db.status().message().find("bad.db:3:"), std::string::npos) << db.status().message();
    EXPECT_NE(db.status().message().find(c.expect), std::string::npos) << db.status().message();
  }
}

TEST(TuningDb, SaveIntoAMissingFolderFailsCleanly) {
  testing::TempDir dir;
  TuningDb db;
  db.put(sample_key(1), sample_entry(1));
  Status st = db.save(dir.path() / "no" / "such" / "dir" / "t.db");
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tuning db"), std::string::npos) << st.message();
}

TEST(TuningDb, SaveReplacesAnOlderFile) {
  testing::TempDir dir;
  const auto path = dir.path() / "t.db";
  testing::write_bytes(path, "garbage that would not parse\n");
  TuningDb db;
  db.put(sample_key(2), sample_entry(4));
  ASSERT_TRUE(db.save(path).ok());
  auto loaded = TuningDb::load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->size(), 1u);
}

schema::Manifest one_gemm_manifest() {
  schema::Manifest m;
  m.mutable_config()->set_max_size(64);
  m.mutable_config()->add_targets("sm_90");
  m.mutable_config()->add_compile_sizes(16);
  m.mutable_config()->add_cudagraph_capture_sizes(1);
  m.mutable_config()->add_cudagraph_capture_sizes(16);
  auto* g = m.add_pieces()->add_steps()->mutable_gemm();
  g->set_node("proj");
  g->mutable_m()->set_coef(1);
  g->mutable_n()->set_offset(32);
  g->mutable_k()->set_offset(8);
  g->mutable_batch()->set_offset(1);
  g->set_epilogue(schema::GEMM_EPILOGUE_BIAS);
  g->set_compute(schema::GEMM_COMPUTE_F16);
  return m;
}

TEST(Autotune, OffDoesNothing) {
  schema::Manifest m = one_gemm_manifest();
  AutotuneOptions o;
  o.mode = AutotuneMode::kOff;
  AutotuneReport r;
  ASSERT_TRUE(autotune_gemms(o, m, &r).ok());
  EXPECT_EQ(m.pieces(0).steps(0).gemm().algos_size(), 0);
  EXPECT_EQ(r.gemms, 0);
}

// A database at `path` holding one_gemm_manifest's GEMM at size 16 (sample_entry(42): 0.0123 ms).
void save_size16_hit(const std::filesystem::path& path) {
  TuningKey k;
  k.arch = "sm_90";
  k.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  k.compute = "F16";
  k.epilogue = "BIAS";
  k.m = 16;
  k.n = 32;
  k.k = 8;
  TuningDb db;
  db.put(k, sample_entry(42));
  ASSERT_TRUE(db.save(path).ok());
}

TEST(Autotune, DatabaseHitsApplyWithoutTiming) {
  // Keys for size 16 only: size 1 is not in the database. Without a GPU (this CPU test, or a
  // GPU of another arch), size 16 gets the recorded choice and size 1 stays with the heuristic.
  testing::TempDir dir;
  const auto path = dir.path() / "t.db";
  save_size16_hit(path);

  schema::Manifest m = one_gemm_manifest();
  AutotuneOptions o;
  o.tuning_db = path;
  o.budget_s = 0;  // never time: only the database may fill in choices
  AutotuneReport r;
  Status st = autotune_gemms(o, m, &r);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(r.gemms, 2);
  EXPECT_EQ(r.from_db, 1);
  EXPECT_EQ(r.timed, 0);
  const auto& g = m.pieces(0).steps(0).gemm();
  ASSERT_EQ(g.algos_size(), 1);
  EXPECT_EQ(g.algos(0).size(), 16u);
  EXPECT_EQ(g.algos(0).algo_id(), 42);
  EXPECT_EQ(g.algos(0).split_k(), 2u);
  EXPECT_EQ(g.algos(0).source(), "tuning-db");
}

TEST(Autotune, UntimedSkinnyKernelsOverTheUntimedLimitGoToCublasLt) {
  // A skinny kernel (the gated step before the GEMM) at sizes 1 and 16, M = S. Nothing is timed
  // (budget 0, no database): with skinny_untimed_max_m 4 (skinny_gemm_max_m: auto) size 16
  // goes back to cuBLASLt and size 1 keeps its kernel; with no limit both keep it.
  for (int64_t limit : {int64_t{4}, INT64_MAX}) {
    schema::Manifest m = one_gemm_manifest();
    schema::Piece& piece = *m.mutable_pieces(0);
    schema::Step gemm = piece.steps(0);
    piece.clear_steps();
    schema::KernelStep& k = *piece.add_steps()->mutable_kernel();
    k.set_gated(true);
    k.add_run_sizes(1);
    k.add_run_sizes(16);
    *piece.add_steps() = gemm;
    piece.mutable_steps(1)->mutable_gemm()->add_skinny_sizes(1);
    piece.mutable_steps(1)->mutable_gemm()->add_skinny_sizes(16);
    AutotuneOptions o;
    o.budget_s = 0;
    o.skinny_untimed_max_m = limit;
    ASSERT_TRUE(autotune_gemms(o, m, nullptr).ok());
    const std::vector<uint32_t> want =
        limit == 4 ? std::vector<uint32_t>{1} : std::vector<uint32_t>{1, 16};
    const auto& g = m.pieces(0).steps(1).gemm();
    EXPECT_EQ(std::vector<uint32_t>(g.skinny_sizes().begin(), g.skinny_sizes().end()), want);
    const auto& run = m.pieces(0).steps(0).kernel().run_sizes();
    EXPECT_EQ(std::vector<uint32_t>(run.begin(), run.end()), want);
  }
}

// A kernel step timed at size 16 (the default won: ms is its time as well).
void add_timed_at_16(schema::KernelStep& k, double ms) {
  schema::TunedLaunch& t = *k.add_tuned();
  t.set_size(16);
  t.set_default_ms(ms);
  t.set_ms(ms);
}

TEST(Autotune, SkinnyKernelAgainstCublasLtWithTheNormAndGatingItFolds) {
  // [RMSNorm (before_cublaslt), skinny kernel (gated, the norm its prologue and the gating its
  // epilogue), GEMM, gating (after_cublaslt)] at size 16: cuBLASLt 0.0123 ms from the database,
  // the skinny kernel 0.015. Whatever of the norm (0.004) and the gating (0.003) is timed counts
  // on cuBLASLt's side: with either, the route costs more than 0.015 and the skinny kernel
  // stays; with neither timed, or neither there, it goes back to cuBLASLt. -1: no such step.
  struct Case {
    double norm_ms, gating_ms;
    bool skinny;
  };
  testing::TempDir dir;
  const auto path = dir.path() / "t.db";
  save_size16_hit(path);
  for (const Case& c : {Case{0.004, -1, true}, Case{-1, 0.003, true}, Case{0.004, 0.003, true},
                        Case{0, 0, false}, Case{-1, -1, false}}) {
    schema::Manifest m = one_gemm_manifest();
    schema::Piece& piece = *m.mutable_pieces(0);
    schema::Step gemm = piece.steps(0);
    piece.clear_steps();
    if (c.norm_ms >= 0) {
      schema::KernelStep& norm = *piece.add_steps()->mutable_kernel();
      norm.set_before_cublaslt(true);
      if (c.norm_ms > 0) add_timed_at_16(norm, c.norm_ms);
    }
    schema::KernelStep& k = *piece.add_steps()->mutable_kernel();
    k.set_gated(true);
    k.add_run_sizes(16);
    schema::TunedLaunch& t = *k.add_tuned();
    t.set_size(16);
    t.set_ms(0.015);
    *piece.add_steps() = gemm;
    const int at = piece.steps_size() - 1;
    piece.mutable_steps(at)->mutable_gemm()->add_skinny_sizes(16);
    if (c.gating_ms >= 0) {
      schema::KernelStep& gating = *piece.add_steps()->mutable_kernel();
      gating.set_after_cublaslt(true);
      if (c.gating_ms > 0) add_timed_at_16(gating, c.gating_ms);
    }
    AutotuneOptions o;
    o.tuning_db = path;
    o.budget_s = 0;
    ASSERT_TRUE(autotune_gemms(o, m, nullptr).ok());
    EXPECT_EQ(m.pieces(0).steps(at).gemm().skinny_sizes_size(), c.skinny ? 1 : 0)
        << "norm " << c.norm_ms << " ms, gating " << c.gating_ms << " ms";
  }
}

TEST(Autotune, SeveralTargetsAreNotTuned) {
  schema::Manifest m = one_gemm_manifest();
  m.mutable_config()->add_targets("sm_80");
  AutotuneOptions o;
  AutotuneReport r;
  ASSERT_TRUE(autotune_gemms(o, m, &r).ok());
  EXPECT_NE(r.skipped.find("per arch"), std::string::npos) << r.skipped;
  o.mode = AutotuneMode::kOn;
  EXPECT_FALSE(autotune_gemms(o, m, &r).ok());
}

}  // namespace
}  // namespace kiln::compiler
