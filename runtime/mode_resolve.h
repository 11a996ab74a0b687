// Which graph mode an executor actually runs, and why it differs from the one requested. Pure:
// the facts come from the validated manifest (graph_mode_facts), the rules are:
//   1. Tuple modes (FULL_DECODE_ONLY, FULL_AND_PIECEWISE) need KV-cache decode (a generation
//      model); without it the executor runs mixed_mode(requested) (NONE / PIECEWISE).
//   2. A graph mode with no capture sizes captures nothing: NONE.
//   3. PIECEWISE when every piece is an attention piece captures nothing: NONE.
//   4. An empty launch program has nothing to capture: NONE.
// Every downgrade carries a reason naming the requested mode, for the log and the report.
#pragma once

#include <cstddef>
#include <string>

#include "kiln/graph_mode.h"
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

struct GraphModeFacts {
  bool has_decode = false;       // a generation model (manifest.generation)
  size_t capture_sizes = 0;      // config.cudagraph_capture_sizes
  size_t pieces = 0;             // pieces of the launch program
  size_t capturable_pieces = 0;  // non-attention pieces
};

struct GraphModeChoice {
  CudaGraphMode requested = CudaGraphMode::kNone;
  CudaGraphMode effective = CudaGraphMode::kNone;  // kNone, kPiecewise or kFull
  std::string reason;                              // empty when effective == requested
};

GraphModeFacts graph_mode_facts(const schema::Manifest& m);

// `requested` must be cuda_graph_mode_valid.
GraphModeChoice graph_mode_resolve(CudaGraphMode requested, const GraphModeFacts& facts);

}  // namespace kiln::runtime
