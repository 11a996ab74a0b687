// Executor::State: what one executor owns — stream, arena, GEMM workspace, GEMM plans per size,
// CUDA graphs per capture size — and the operations run() and time_device() share.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/executor.h"
#include "runtime/gemm_plan.h"
#include "runtime/launch_program.h"
#include "runtime/model_state.h"
#include "runtime/size_graphs.h"

namespace kiln {

struct Executor::State {
  std::shared_ptr<const Model> model;
  const runtime::ModelState* ms = nullptr;
  ExecutorOptions options;
  CudaGraphMode mode = CudaGraphMode::kNone;  // effective, after downgrades
  std::vector<runtime::Segment> segments;

  cudaStream_t stream = nullptr;
  char* arena = nullptr;
  size_t arena_bytes = 0;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  std::map<int64_t, runtime::GemmPlanSet> plans;                   // by padded size
  std::map<int64_t, std::unique_ptr<runtime::SizeGraphs>> graphs;  // by capture size
  std::vector<int64_t> captured;                                   // sorted

  ExecutorStats stats;
  bool eager_logged = false;
  std::mutex mu;  // run() and time_device() are serialised

  ~State();
  runtime::LaunchContext context() const;
  // The GEMM plans for size p, made on first use.
  Result<const runtime::GemmPlanSet*> plans_for(int64_t p);
  // The whole program at size p: graph replay when p is captured, else eager.
  Status execute(int64_t p, const runtime::GemmPlanSet& plans);
  // Allocations, plans and (per mode) warm-up + capture of every capture size.
  Status init();
};

}  // namespace kiln
