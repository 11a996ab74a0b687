// GEMM autotuning at compile time: for every GEMM step of a manifest and every size the runtime
// plans GEMMs for (compile and capture sizes), time cuBLASLt's top heuristic candidates on the
// GPU and record the fastest as GemmStep.algos, which the runtime re-creates at load instead of
// asking the heuristic. The heuristic's first choice is always a candidate, and another is kept
// only when it measured faster, so a tuned GEMM is never slower than the default on the shapes
// measured. A tuning database (tuning_db.h) carries decisions between compiles: a hit skips the
// timing, so a compile without a GPU still gets earlier decisions. A GEMM with a skinny kernel
// (skinny_gemm_codegen.h) is then compared with it at each compile size where both have a
// measured time (the kernel's from kernel_autotune): where cuBLASLt is faster, the size leaves
// both gated lists and cuBLASLt runs there.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "cache/status.h"
#include "compiler/config.h"
#include "schemas/manifest.pb.h"

namespace kiln::compiler {

struct AutotuneOptions {
  AutotuneMode mode = AutotuneMode::kAuto;  // the config's autotune.enabled (compiler/config.h)
  double budget_s = 60;             // stop timing (keep the heuristic) once this much time is spent
  std::filesystem::path tuning_db;  // empty: none; read before tuning, rewritten after
  int candidates = 8;               // heuristic candidates timed per GEMM and size
  // A skinny kernel over more rows than this stays only where it was timed against cuBLASLt
  // and won (SkinnyLimits::untimed, compiler/config.h): left untimed (budget spent, no timing
  // of the kernel), that size goes to cuBLASLt.
  int64_t skinny_untimed_max_m = INT64_MAX;
};

struct AutotuneReport {
  int gemms = 0;        // (step, size) pairs considered
  int timed = 0;        // measured on the GPU
  int from_db = 0;      // taken from the tuning database
  int improved = 0;     // a candidate other than the heuristic's first choice won
  int over_budget = 0;  // left to the heuristic because the budget ran out
  double seconds = 0;
  std::string skipped;  // why no timing happened (no GPU, other arch), empty when it did
};

// Fills GemmStep.algos (one entry per size, source "autotune" or "tuning-db") of `m`, whose
// buffers and config are final (call it after the manifest is built, before it is written).
Status autotune_gemms(const AutotuneOptions& options, schema::Manifest& m,
                      AutotuneReport* report = nullptr);

}  // namespace kiln::compiler
