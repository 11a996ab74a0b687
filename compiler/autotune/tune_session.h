// What the GEMM tuner (autotune.h) and the kernel tuner (kernel_autotune.h) share around their own
// work: the mode, the clock and the budget, the GPU they may time on (present and of a target
// arch, or timing is skipped and only the database answers), and the tuning database, read when
// the session opens and rewritten when it closes if it gained decisions.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "compiler/autotune/autotune.h"
#include "compiler/autotune/tuning_db.h"

namespace kiln::compiler {

// "sm_90" for the current CUDA device; an error when there is none.
Result<std::string> tune_device_arch();

// Whether the GEMM tuner will time on this machine: autotuning not off, one target, and a GPU of
// that arch (the lowering gives skinny kernels more rows where each choice is timed).
bool autotune_times_gemms(const AutotuneOptions& options, const std::vector<std::string>& targets);

class TuneSession {
 public:
  // Probes the GPU, then loads options.tuning_db (a missing file is an empty database). Timing
  // needs a GPU whose arch is one of `targets` (not empty); decisions are recorded for that arch,
  // or for targets[0] without such a GPU. `what` ("GEMMs", "kernels") names the work in messages:
  // with AutotuneMode::kOn and no such GPU, "autotune: on, but cannot time <what>: <why>".
  static Result<TuneSession> open(const AutotuneOptions& options,
                                  const std::vector<std::string>& targets, std::string_view what);

  bool gpu() const { return skipped_.empty(); }            // timing can run
  const std::string& arch() const { return arch_; }        // decisions are for this arch
  const std::string& skipped() const { return skipped_; }  // why timing cannot run
  TuningDb& db() { return db_; }

  double elapsed() const;     // seconds since the session opened
  bool budget_spent() const;  // elapsed() > options.budget_s
  // budget_spent(); the first time it is, an info line that the rest of the work is left as it
  // is: "the remaining <rest>" (e.g. "GEMMs keep the heuristic").
  bool over_budget(std::string_view rest);

  // Rewrites the tuning database when the session added decisions; `seconds` gets elapsed().
  Status close(double* seconds);

 private:
  TuneSession() = default;
  const AutotuneOptions* options_ = nullptr;
  std::chrono::steady_clock::time_point start_;
  std::string what_, arch_, skipped_;
  TuningDb db_;
  size_t db_size_at_open_ = 0;
  bool budget_noted_ = false;
};

}  // namespace kiln::compiler
