// The loaded artifact behind kiln::Model: the validated manifest, device weights, loaded cubins,
// kernel handles and the cuBLASLt handle. It owns all of them; the destructor releases them.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <vector>

#include "runtime/model.h"
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

struct ModelState {
  schema::Manifest manifest;  // validated by manifest_validate
  std::filesystem::path dir;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  std::vector<int64_t> capture_sizes;
  CudaGraphMode mode = CudaGraphMode::kNone;
  std::vector<size_t> piece_first_step;  // flat index of each piece's first step; pieces + 1

  int device = -1;
  void* weights = nullptr;               // weights_bytes on the device (null when 0)
  std::vector<cudaLibrary_t> libraries;  // one per module
  std::vector<cudaKernel_t> kernels;     // one per manifest kernel
  cublasLtHandle_t lt = nullptr;

  ModelState() = default;
  ~ModelState();
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  size_t step_count() const { return piece_first_step.back(); }
  // Device address of buffer `index` (validated) for an executor whose arena starts at `arena`.
  void* buffer_ptr(char* arena, uint32_t index) const;
};

// Everything that needs no CUDA, from a validated manifest.
std::unique_ptr<ModelState> model_state_create(schema::Manifest manifest,
                                               std::filesystem::path dir);

// The CUDA half of Model::load: picks the cubin for this GPU's arch, uploads the weights, loads
// the modules and kernels, checks them against the launch program, creates the cuBLASLt handle.
Status model_state_upload(ModelState& state);

CudaGraphMode graph_mode_from_schema(schema::CudaGraphMode m);

}  // namespace kiln::runtime
