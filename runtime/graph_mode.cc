#include "kiln/graph_mode.h"

namespace kiln {

const char* cuda_graph_mode_name(CudaGraphMode m) {
  switch (m) {
    case CudaGraphMode::kNone:
      return "NONE";
    case CudaGraphMode::kPiecewise:
      return "PIECEWISE";
    case CudaGraphMode::kFull:
      return "FULL";
    case CudaGraphMode::kFullDecodeOnly:
      return "FULL_DECODE_ONLY";
    case CudaGraphMode::kFullAndPiecewise:
      return "FULL_AND_PIECEWISE";
  }
  return "UNKNOWN";
}

std::optional<CudaGraphMode> cuda_graph_mode_from_name(std::string_view name) {
  for (CudaGraphMode m : kCudaGraphModes)
    if (name == cuda_graph_mode_name(m)) return m;
  return std::nullopt;
}

bool cuda_graph_mode_valid(CudaGraphMode m) {
  for (CudaGraphMode v : kCudaGraphModes)
    if (m == v) return true;
  return false;
}

CudaGraphMode decode_mode(CudaGraphMode m) {
  return separate_routine(m) ? CudaGraphMode::kFull : m;
}

CudaGraphMode mixed_mode(CudaGraphMode m) {
  switch (m) {
    case CudaGraphMode::kFullDecodeOnly:
      return CudaGraphMode::kNone;
    case CudaGraphMode::kFullAndPiecewise:
      return CudaGraphMode::kPiecewise;
    default:
      return m;
  }
}

bool has_full_cudagraphs(CudaGraphMode m) {
  return decode_mode(m) == CudaGraphMode::kFull || mixed_mode(m) == CudaGraphMode::kFull;
}

bool has_piecewise_cudagraphs(CudaGraphMode m) {
  return decode_mode(m) == CudaGraphMode::kPiecewise || mixed_mode(m) == CudaGraphMode::kPiecewise;
}

bool separate_routine(CudaGraphMode m) {
  return m == CudaGraphMode::kFullDecodeOnly || m == CudaGraphMode::kFullAndPiecewise;
}

}  // namespace kiln
