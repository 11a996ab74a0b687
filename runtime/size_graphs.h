// CUDA graphs of one padded size. The program is cut into segments — runs of consecutive
// pieces — each either captured as one graph or launched eagerly: FULL captures one segment of
// every piece, PIECEWISE one per maximal run of non-attention pieces (attention pieces run
// eagerly in between), NONE captures nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/status.h"
#include "kiln/model.h"
#include "runtime/launch_program.h"

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
  // instantiates and uploads it. Errors name the size, the pieces and the failing step; a
  // failed capture is always ended, so the stream is usable (and destroyable) afterwards.
  // `io_addresses` are the static input/output buffers the graphs read and write, recorded for
  // check_addresses.
  static Result<std::unique_ptr<SizeGraphs>> capture(const LaunchContext& ctx,
                                                     const GemmPlanSet& plans,
                                                     const std::vector<Segment>& segments,
                                                     int64_t p,
                                                     std::vector<const void*> io_addresses);
  ~SizeGraphs();
  SizeGraphs(const SizeGraphs&) = delete;
  SizeGraphs& operator=(const SizeGraphs&) = delete;

  // Replays the captured segments and launches the others eagerly, in program order.
  Status run(const LaunchContext& ctx, const GemmPlanSet& plans,
             const std::vector<Segment>& segments, int64_t p) const;

  // Debug-mode guard: internal_error naming the tensor when a static buffer is no longer where
  // the graphs were captured (`names` label `now`, in the same order as at capture).
  Status check_addresses(const std::vector<const void*>& now, const std::vector<std::string>& names,
                         int64_t p) const;

  size_t graph_count() const;  // instantiated graphs (segments that captured something)

 private:
  SizeGraphs() = default;
  std::vector<cudaGraphExec_t> execs_;  // one per segment; null: eager, or captured nothing
  std::vector<const void*> io_addresses_;
};

}  // namespace kiln::runtime
