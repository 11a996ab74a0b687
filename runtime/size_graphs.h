// CUDA graphs of one padded size. The program is cut into segments — runs of consecutive
// pieces — each either captured as one graph or launched eagerly: FULL captures one segment of
// every piece, PIECEWISE one per maximal run of non-attention pieces (attention pieces run
// eagerly in between), NONE captures nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/status.h"
#include "runtime/launch_program.h"
#include "runtime/model.h"

namespace kiln::runtime {

struct Segment {
  size_t first = 0;  // pieces [first, last)
  size_t last = 0;
  bool captured = false;
};

// Pure; `mode` is the effective mode (after downgrades): kNone, kPiecewise or kFull.
std::vector<Segment> segments_for_mode(const schema::Manifest& m, CudaGraphMode mode);

class SizeGraphs {
 public:
  // Captures every captured segment at size p (cudaStreamCaptureModeThreadLocal) and
  // instantiates and uploads it. Errors name the size, the pieces and the failing step.
  static Result<std::unique_ptr<SizeGraphs>> capture(const LaunchContext& ctx,
                                                     const GemmPlanSet& plans,
                                                     const std::vector<Segment>& segments,
                                                     int64_t p);
  ~SizeGraphs();
  SizeGraphs(const SizeGraphs&) = delete;
  SizeGraphs& operator=(const SizeGraphs&) = delete;

  // Replays the captured segments and launches the others eagerly, in program order.
  Status run(const LaunchContext& ctx, const GemmPlanSet& plans,
             const std::vector<Segment>& segments, int64_t p) const;

 private:
  SizeGraphs() = default;
  std::vector<cudaGraphExec_t> execs_;  // one per segment; null: eager, or captured nothing
};

}  // namespace kiln::runtime
