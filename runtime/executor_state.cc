#include "runtime/executor_state.h"

#include <algorithm>
#include <string>
#include <utility>

#include "runtime/cuda_check.h"

namespace kiln {

namespace {
constexpr size_t kMinWorkspaceBytes = size_t{32} << 20;
}  // namespace

Executor::State::~State() {
  if (ms == nullptr || ms->device < 0) return;
  runtime::DeviceGuard guard(ms->device);
  if (stream != nullptr) (void)cudaStreamSynchronize(stream);
  graphs.clear();
  plans.clear();
  if (stream != nullptr) (void)cudaStreamDestroy(stream);
  if (workspace != nullptr) (void)cudaFree(workspace);
  if (arena != nullptr) (void)cudaFree(arena);
  (void)cudaGetLastError();
}

runtime::LaunchContext Executor::State::context() const {
  runtime::LaunchContext ctx;
  ctx.model = ms;
  ctx.arena = arena;
  ctx.workspace = workspace;
  ctx.workspace_bytes = workspace_bytes;
  ctx.stream = stream;
  return ctx;
}

Result<const runtime::GemmPlanSet*> Executor::State::plans_for(int64_t p) {
  auto it = plans.find(p);
  if (it != plans.end()) return &it->second;
  KILN_ASSIGN_OR_RETURN(runtime::GemmPlanSet set,
                        runtime::gemm_plans_create(*ms, arena, p, workspace_bytes));
  return &plans.emplace(p, std::move(set)).first->second;
}

Status Executor::State::execute(int64_t p, const runtime::GemmPlanSet& set) {
  auto it = graphs.find(p);
  if (it != graphs.end()) return it->second->run(context(), set, segments, p);
  return runtime::launch_pieces(context(), set, 0, static_cast<size_t>(ms->manifest.pieces_size()),
                                p);
}

Status Executor::State::init() {
  const auto& m = ms->manifest;
  KILN_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                "cudaStreamCreateWithFlags");
  arena_bytes = std::max<uint64_t>(m.arena_bytes(), 1);
  void* ptr = nullptr;
  KILN_CUDA_TRY(cudaMalloc(&ptr, arena_bytes),
                "cudaMalloc of the " + std::to_string(arena_bytes) + "-byte activation arena");
  arena = static_cast<char*>(ptr);
  // Zeroed once, so a warm-up run never reads garbage (an index buffer, say) before the first
  // inputs arrive.
  KILN_CUDA_TRY(cudaMemsetAsync(arena, 0, arena_bytes, stream), "zeroing the arena");
  workspace_bytes = std::max<uint64_t>(m.gemm_workspace_bytes(), kMinWorkspaceBytes);
  KILN_CUDA_TRY(cudaMalloc(&workspace, workspace_bytes),
                "cudaMalloc of the " + std::to_string(workspace_bytes) + "-byte GEMM workspace");
  segments = runtime::segments_for_mode(m, mode);
  if (mode == CudaGraphMode::kNone) return Status::ok_status();
  const auto n_pieces = static_cast<size_t>(m.pieces_size());
  for (int64_t p : ms->capture_sizes) {
    KILN_ASSIGN_OR_RETURN(const runtime::GemmPlanSet* set, plans_for(p));
    // Warm-up: cuBLASLt and lazy module loading may allocate on first use, which must not
    // happen inside a capture.
    Status warm = runtime::launch_pieces(context(), *set, 0, n_pieces, p);
    if (!warm.ok()) return warm.with_context("warm-up run at size " + std::to_string(p));
    KILN_CUDA_TRY(cudaStreamSynchronize(stream),
                  "warm-up run at size " + std::to_string(p) + " (cudaStreamSynchronize)");
    KILN_ASSIGN_OR_RETURN(auto size_graphs,
                          runtime::SizeGraphs::capture(context(), *set, segments, p));
    graphs.emplace(p, std::move(size_graphs));
    captured.push_back(p);
  }
  KILN_CUDA_TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize after capture");
  return Status::ok_status();
}

}  // namespace kiln
