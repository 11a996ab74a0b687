// Timing cuBLASLt candidates for one GEMM step at one size (the GPU half of autotune.h). The
// step is planned with the runtime's own GemmPlan, on a private arena laid out like the real one
// (every operand 256-aligned, the same batch strides), so the candidates are exactly those the
// runtime's heuristic would consider and the first is the one it would pick.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::compiler {

struct GemmTiming {
  schema::GemmAlgo algo;    // the winner's config, size set, source "autotune"
  double ms = 0;            // median time of the winner per GEMM
  double heuristic_ms = 0;  // median time of the heuristic's first choice
  int candidates = 0;       // candidates timed (those that failed to run are not counted)
  bool improved = false;    // the winner is not the heuristic's first choice
};

class GemmTuner {
 public:
  // Uses the current CUDA device. `m` must outlive the tuner.
  static Result<std::unique_ptr<GemmTuner>> create(const schema::Manifest& m);
  ~GemmTuner();
  GemmTuner(const GemmTuner&) = delete;
  GemmTuner& operator=(const GemmTuner&) = delete;

  // Times up to `candidates` heuristic candidates of step `g` at size `p`; the heuristic's
  // first choice wins unless another is at least 1% faster.
  Result<GemmTiming> tune(const schema::GemmStep& g, int64_t p, int candidates);

 private:
  GemmTuner() = default;
  const schema::Manifest* m_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace kiln::compiler
