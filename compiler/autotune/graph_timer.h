// How the autotuners time a candidate: its launches, rotating over a few operand sets so caches
// do not flatter it, captured into one CUDA graph and replayed; the median replay counts. This
// is how the runtime runs them (graph replay), so launch overhead is measured as it will be paid.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "cache/status.h"

namespace kiln::compiler {

// Operand sets a candidate rotates over: as many as fit kMaxOperandSetBytes in all, from 1 to
// kOperandSets (large operands already miss the caches).
inline constexpr int kOperandSets = 3;
inline constexpr uint64_t kMaxOperandSetBytes = uint64_t{1} << 30;

// `enqueue(calls)` enqueues `calls` launches of the candidate on `stream`, call c on operand set
// c % sets. Runs a warm-up (which also rejects a candidate that cannot run), sizes the graph to
// about half a millisecond, replays it and returns the median milliseconds per call. When the
// stream cannot be captured it times eager launches instead.
Result<double> graph_median_ms(cudaStream_t stream, int sets,
                               const std::function<Status(int calls)>& enqueue);

}  // namespace kiln::compiler
