#include "runtime/model_state.h"

#include <utility>

#include "runtime/cuda_check.h"
#include "runtime/graph_mode_schema.h"

namespace kiln::runtime {

TensorInfo tensor_info(const schema::IoBinding& io) {
  TensorInfo info;
  info.name = io.name();
  info.dtype = static_cast<DType>(io.dtype());
  for (const auto& d : io.dims()) info.dims.push_back(DimSpec{d.coef(), d.offset()});
  info.size_axis = io.size_axis();
  return info;
}

std::unique_ptr<ModelState> model_state_create(schema::Manifest manifest,
                                               std::filesystem::path dir) {
  auto state = std::make_unique<ModelState>();
  state->manifest = std::move(manifest);
  state->dir = std::move(dir);
  const auto& m = state->manifest;
  for (const auto& io : m.inputs()) state->inputs.push_back(tensor_info(io));
  for (const auto& io : m.outputs()) state->outputs.push_back(tensor_info(io));
  for (uint32_t s : m.config().cudagraph_capture_sizes()) state->capture_sizes.push_back(s);
  state->mode = graph_mode_from_schema(m.config().mode());
  state->piece_first_step.push_back(0);
  for (const auto& piece : m.pieces())
    state->piece_first_step.push_back(state->piece_first_step.back() +
                                      static_cast<size_t>(piece.steps_size()));
  return state;
}

void* ModelState::buffer_ptr(char* arena, uint32_t index) const {
  const auto& b = manifest.buffers(static_cast<int>(index));
  char* base = b.location() == schema::Buffer::LOCATION_ARENA ? arena : static_cast<char*>(weights);
  if (base == nullptr) return nullptr;  // only for zero-byte weight buffers
  return base + b.offset();
}

ModelState::~ModelState() {
  if (device < 0) return;  // nothing was created on a device
  DeviceGuard guard(device);
  if (lt != nullptr) (void)cublasLtDestroy(lt);
  for (cudaLibrary_t lib : libraries)
    if (lib != nullptr) (void)cudaLibraryUnload(lib);
  if (weights != nullptr) (void)cudaFree(weights);
  (void)cudaGetLastError();
}

}  // namespace kiln::runtime
