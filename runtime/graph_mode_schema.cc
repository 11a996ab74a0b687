#include "runtime/graph_mode_schema.h"

#include <utility>

namespace kiln::runtime {
namespace {

// One row per mode, in kCudaGraphModes order.
constexpr std::pair<CudaGraphMode, schema::CudaGraphMode> kWire[] = {
    {CudaGraphMode::kNone, schema::CUDA_GRAPH_MODE_NONE},
    {CudaGraphMode::kPiecewise, schema::CUDA_GRAPH_MODE_PIECEWISE},
    {CudaGraphMode::kFull, schema::CUDA_GRAPH_MODE_FULL},
    {CudaGraphMode::kFullDecodeOnly, schema::CUDA_GRAPH_MODE_FULL_DECODE_ONLY},
    {CudaGraphMode::kFullAndPiecewise, schema::CUDA_GRAPH_MODE_FULL_AND_PIECEWISE},
};

constexpr bool covers_every_mode() {
  if (std::size(kWire) != kCudaGraphModes.size()) return false;
  for (size_t i = 0; i < kCudaGraphModes.size(); ++i)
    if (kWire[i].first != kCudaGraphModes[i]) return false;
  return std::size(kWire) + 1 == schema::CudaGraphMode_ARRAYSIZE;
}
static_assert(covers_every_mode(), "kWire must list every CudaGraphMode and every wire mode");

}  // namespace

schema::CudaGraphMode graph_mode_to_schema(CudaGraphMode m) {
  for (const auto& [mode, wire] : kWire)
    if (mode == m) return wire;
  return schema::CUDA_GRAPH_MODE_UNSPECIFIED;
}

CudaGraphMode graph_mode_from_schema(schema::CudaGraphMode m) {
  for (const auto& [mode, wire] : kWire)
    if (wire == m) return mode;
  return CudaGraphMode::kNone;
}

}  // namespace kiln::runtime
