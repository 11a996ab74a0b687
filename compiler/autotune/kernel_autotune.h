// Launch-configuration autotuning of generated kernels at compile time. Family codegen offers
// candidates for a launch (LaunchCandidate: another block size, vector width, rows per block or
// attention tile shape, same arguments); for every compile size the default and each candidate
// run on the GPU on random operands, outputs are compared with the default's (a candidate that
// disagrees is rejected), and each is timed as CUDA-graph replays over rotating operand sets; the
// median counts. A candidate is kept only when it measured at least 2% faster than the default,
// so a tuned launch is never slower than the default on the shapes measured. Decisions go into
// KernelLaunch::tuned (the artifact then carries the winners as kernels specialised for that
// size) and into the tuning database, which a compile without a GPU reuses.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/autotune/autotune.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// The sizes at which some skinny GEMM kernel may run (the union of the gated launches'
// run_sizes, ascending): only there can a size's GEMM go either way.
std::vector<int64_t> route_decision_sizes(const LoweredProgram& program);

// Whether timing `l` at `size` also decides a skinny GEMM against cuBLASLt: the skinny kernel
// itself (gated to the sizes where it replaces the cuBLASLt step: run_sizes), and the norm and
// gating kernels that run only on the cuBLASLt route (before_cublaslt, after_cublaslt), whose
// times count on that side (autotune.cc), at a size in `route_sizes` (route_decision_sizes).
// Such (launch, size) pairs are compiled and timed in a first round, before the rest, within
// the budget; a norm's time at a size where no skinny kernel runs waits for the second.
bool launch_decides_route(const KernelLaunch& l, int64_t size,
                          const std::vector<int64_t>& route_sizes);

struct KernelAutotuneReport {
  int decisions = 0;    // (default kernel, compile size) pairs with candidates
  int timed = 0;        // decided by timing on the GPU
  int from_db = 0;      // decided by the tuning database
  int improved = 0;     // a candidate beat the default
  int over_budget = 0;  // left to the default because the budget was spent
  int rejected = 0;     // candidates that failed to run or whose outputs differed
  double seconds = 0;
  std::string skipped;  // why nothing was timed (no GPU, another arch); empty when timing ran
};

// Decides the launches of `program` that have candidates, at every size in `sizes` (the compile
// sizes: a decision becomes a specialised kernel). Launches whose default kernel is the same
// (same text, so the same shapes) share one decision. Timing needs a GPU whose arch is one of
// `targets`; the database is consulted for that arch, or for targets[0] without such a GPU.
Status autotune_kernels(const AutotuneOptions& options, const ir::Graph& g,
                        const std::vector<int64_t>& sizes, const std::vector<std::string>& targets,
                        LoweredProgram& program, KernelAutotuneReport* report = nullptr);

// Testing: every launch with more than `n` candidates uses candidate n at every size in `sizes`
// (source "forced"). Returns how many launches it changed.
int force_kernel_candidate(LoweredProgram& program, const std::vector<int64_t>& sizes, int n);

// The module the tuner compiles for the launches sharing `launch`'s default kernel: that kernel
// and every candidate, each specialised for every size in `sizes`.
std::string launch_bench_source(const LoweredProgram& program, const KernelLaunch& launch,
                                const std::vector<int64_t>& sizes);

// The IR values a launch's arguments name, each once, in argument order, and how the tuner
// fills them: autotune_random_bytes (random floats, zero integers), or ones for a value an
// attention reads as its key padding (kAttnKeyPaddingParam): zeros there would exclude every key,
// and the candidates would be timed, and their outputs compared, on rows that see nothing.
struct LaunchOperand {
  int value = -1;
  bool ones = false;
};
std::vector<LaunchOperand> launch_operands(const KernelDef& def, const KernelLaunch& launch);

// One kernel launch at one size on the current GPU: its operands in device memory (a few sets,
// launch_operands), the default and the candidates loaded from a cubin of
// launch_bench_source. Used by the tuner, and by tests that re-time a decision.
class LaunchBench {
 public:
  static Result<std::unique_ptr<LaunchBench>> create(const ir::Graph& g,
                                                     const LoweredProgram& program,
                                                     const KernelLaunch& launch, int64_t size,
                                                     const std::vector<uint8_t>& cubin);
  ~LaunchBench();
  LaunchBench(const LaunchBench&) = delete;
  LaunchBench& operator=(const LaunchBench&) = delete;

  // Median milliseconds per launch of configuration `which` (-1: the default, else a candidate
  // index), in graph replay over the operand sets.
  Result<double> time(int which);
  // Runs the default and then `which` on the same initial operands and compares every buffer;
  // empty when they agree within the output dtype's tolerance, else the first difference.
  Result<std::string> differs_from_default(int which);

 private:
  struct Config {
    cudaKernel_t fn = nullptr;
    int64_t blocks = 0, blocks_y = 1;
    uint32_t block = 0, shared = 0;
  };
  LaunchBench() = default;
  Status launch(int which, int set);

  const KernelLaunch* launch_ = nullptr;
  const ir::Graph* g_ = nullptr;
  int64_t size_ = 0;
  cudaLibrary_t lib_ = nullptr;
  cudaStream_t stream_ = nullptr;
  std::vector<Config> configs_;             // [0] the default, [1 + i] candidate i
  std::vector<int> values_;                 // distinct IR values the arguments name
  std::vector<std::vector<void*>> sets_;    // per set, a device buffer per value
  std::vector<std::vector<uint8_t>> init_;  // per value, set 0's initial bytes
  int64_t* real_size_ = nullptr;  // device int64 = size_, for real-size pointer arguments
};

}  // namespace kiln::compiler
