// The loaded artifact behind kiln::Model: the validated manifest, device weights, loaded cubins,
// kernel handles, the cuBLASLt handle and the GEMM algorithms chosen at load. It owns all of
// them; the destructor releases them. Never modified after Model::load returns, so executors on
// any thread read it without locks (the cuBLASLt handle is thread-safe: it holds no stream).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "kiln/model.h"
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

// A cuBLASLt algorithm chosen at load for one GEMM step at one size.
struct GemmAlgo {
  bool chosen = false;
  cublasLtMatmulAlgo_t algo{};
};

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
  size_t workspace_bytes = 0;  // the GEMM workspace each executor allocates
  bool programmatic_launch = false;  // launch kernels with programmatic dependent launch
  // By size (every capture and compile size), then by flat step index (unset for kernel steps).
  std::map<int64_t, std::vector<GemmAlgo>> gemm_algos;
  LoadReport report;

  ModelState() = default;
  ~ModelState();
  ModelState(const ModelState&) = delete;
  ModelState& operator=(const ModelState&) = delete;

  size_t step_count() const { return piece_first_step.back(); }
  // Device address of buffer `index` (validated) for an executor whose arena starts at `arena`.
  void* buffer_ptr(char* arena, uint32_t index) const;
};

// A manifest input or output as the public API describes it (validated manifests only).
TensorInfo tensor_info(const schema::IoBinding& io);

// Everything that needs no CUDA, from a validated manifest.
std::unique_ptr<ModelState> model_state_create(schema::Manifest manifest,
                                               std::filesystem::path dir);

// The CUDA half of Model::load: checks the artifact against this GPU
// (cache::artifact_check_compatible), uploads the weights, loads the modules and kernels,
// checks them against the launch program, creates the cuBLASLt handle and chooses the GEMM
// algorithms. Fills the device phases of state.report.
Status model_state_upload(ModelState& state, const LoadOptions& options);

}  // namespace kiln::runtime
