#include "compiler/autotune/graph_timer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/cuda_check.h"
#include "runtime/median.h"

namespace kiln::compiler {
namespace {

constexpr int kReplays = 15;       // timed graph replays; the median counts
constexpr double kTargetMs = 0.5;  // each replay runs at least this long
constexpr int kMaxCallsPerGraph = 256;

struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~Events() {
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
  }
};

struct Graph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~Graph() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
};

}  // namespace

Result<double> graph_median_ms(cudaStream_t stream, int sets,
                               const std::function<Status(int calls)>& enqueue) {
  Events ev;
  KILN_CUDA_TRY(cudaEventCreate(&ev.start), "cudaEventCreate");
  KILN_CUDA_TRY(cudaEventCreate(&ev.stop), "cudaEventCreate");
  KILN_RETURN_IF_ERROR(enqueue(sets));  // warm-up; also rejects a candidate that cannot run
  KILN_CUDA_TRY(cudaEventRecord(ev.start, stream), "event");
  KILN_RETURN_IF_ERROR(enqueue(sets));
  KILN_CUDA_TRY(cudaEventRecord(ev.stop, stream), "event");
  KILN_CUDA_TRY(cudaEventSynchronize(ev.stop), "warm-up");
  float est = 0;
  KILN_CUDA_TRY(cudaEventElapsedTime(&est, ev.start, ev.stop), "elapsed");
  const double per_call = std::max(1e-4, static_cast<double>(est) / sets);
  int calls = static_cast<int>(std::ceil(kTargetMs / per_call));
  calls = std::clamp((calls + sets - 1) / sets * sets, sets, kMaxCallsPerGraph);

  Graph g;
  bool captured = false;
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    Status st = enqueue(calls);
    const cudaError_t end = cudaStreamEndCapture(stream, &g.graph);
    captured = st.ok() && end == cudaSuccess && cudaGraphInstantiate(&g.exec, g.graph, 0) == cudaSuccess;
  }
  (void)cudaGetLastError();  // a refused capture is not an error: time eagerly instead
  std::vector<double> ms;
  for (int r = 0; r < kReplays + 1; ++r) {
    KILN_CUDA_TRY(cudaEventRecord(ev.start, stream), "event");
    KILN_RETURN_IF_ERROR(captured ? runtime::cuda_status(cudaGraphLaunch(g.exec, stream), "graph")
                                  : enqueue(calls));
    KILN_CUDA_TRY(cudaEventRecord(ev.stop, stream), "event");
    KILN_CUDA_TRY(cudaEventSynchronize(ev.stop), "timed run");
    float e = 0;
    KILN_CUDA_TRY(cudaEventElapsedTime(&e, ev.start, ev.stop), "elapsed");
    if (r > 0) ms.push_back(static_cast<double>(e) / calls);  // replay 0 warms up
  }
  return runtime::median(std::move(ms));
}

}  // namespace kiln::compiler
