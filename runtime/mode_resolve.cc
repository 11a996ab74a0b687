#include "runtime/mode_resolve.h"

namespace kiln::runtime {

GraphModeFacts graph_mode_facts(const schema::Manifest& m) {
  GraphModeFacts f;
  f.has_decode = m.has_generation();
  f.capture_sizes = static_cast<size_t>(m.config().cudagraph_capture_sizes_size());
  f.pieces = static_cast<size_t>(m.pieces_size());
  for (const auto& piece : m.pieces())
    if (!piece.is_attention()) ++f.capturable_pieces;
  return f;
}

GraphModeChoice graph_mode_resolve(CudaGraphMode requested, const GraphModeFacts& facts) {
  GraphModeChoice c;
  c.requested = requested;
  c.effective = requested;
  const std::string asked = std::string("graph mode ") + cuda_graph_mode_name(requested);
  auto downgrade = [&](CudaGraphMode to, const std::string& why) {
    c.effective = to;
    c.reason +=
        (c.reason.empty() ? asked + ": " : "; then ") + why + ": using " + cuda_graph_mode_name(to);
  };
  if (separate_routine(requested) && !facts.has_decode)
    downgrade(mixed_mode(requested),
              "its decode graphs need a model compiled for generation (a KV-cache decoder "
              "compiled with `kv_cache:` in its config), so every batch is a mixed batch");
  if (c.effective == CudaGraphMode::kNone) return c;
  if (facts.pieces == 0) {
    downgrade(CudaGraphMode::kNone, "the launch program is empty, there is nothing to capture");
  } else if (facts.capture_sizes == 0) {
    downgrade(CudaGraphMode::kNone, "the artifact has no cudagraph_capture_sizes");
  } else if (c.effective == CudaGraphMode::kPiecewise && facts.capturable_pieces == 0) {
    downgrade(CudaGraphMode::kNone,
              "every piece is an attention piece, so PIECEWISE would capture nothing");
  }
  return c;
}

}  // namespace kiln::runtime
