#include "runtime/size_graphs.h"

#include <cstdio>
#include <string>
#include <utility>

#include "runtime/capture_fault.h"
#include "runtime/cuda_check.h"

namespace kiln::runtime {
namespace {

std::string segment_label(const Segment& s, int64_t p) {
  return "size " + std::to_string(p) + " (pieces " + std::to_string(s.first) + ".." +
         std::to_string(s.last - 1) + ")";
}

struct GraphGuard {
  cudaGraph_t graph = nullptr;
  ~GraphGuard() {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
  }
};

struct ExecGuard {
  cudaGraphExec_t exec = nullptr;
  ~ExecGuard() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
  }
};

std::string address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", p);
  return buf;
}

Result<cudaGraphExec_t> segment_capture(const LaunchContext& ctx, const GemmPlanSet& plans,
                                        const Segment& seg, size_t index, int64_t p) {
  const std::string label = segment_label(seg, p);
  KILN_CUDA_TRY(cudaStreamBeginCapture(ctx.stream, cudaStreamCaptureModeThreadLocal),
                "cudaStreamBeginCapture for " + label);
  Status launched = capture_fault_check(p, index);
  if (launched.ok()) launched = launch_pieces(ctx, plans, seg.first, seg.last, p);
  GraphGuard graph;
  cudaError_t ended = cudaStreamEndCapture(ctx.stream, &graph.graph);
  if (!launched.ok()) {
    (void)cudaGetLastError();
    return launched.with_context("capturing " + label);
  }
  KILN_CUDA_TRY(ended, "cudaStreamEndCapture for " + label);
  size_t nodes = 0;
  KILN_CUDA_TRY(cudaGraphGetNodes(graph.graph, nullptr, &nodes), "cudaGraphGetNodes for " + label);
  if (nodes == 0) return cudaGraphExec_t{nullptr};  // nothing to launch at this size
  ExecGuard exec;
  KILN_CUDA_TRY(cudaGraphInstantiate(&exec.exec, graph.graph, 0),
                "cudaGraphInstantiate for " + label);
  KILN_CUDA_TRY(cudaGraphUpload(exec.exec, ctx.stream), "cudaGraphUpload for " + label);
  cudaGraphExec_t out = exec.exec;
  exec.exec = nullptr;
  return out;
}

}  // namespace

std::vector<Segment> segments_for_mode(const schema::Manifest& m, CudaGraphMode mode) {
  const auto n = static_cast<size_t>(m.pieces_size());
  std::vector<Segment> segments;
  if (n == 0) return segments;
  if (mode != CudaGraphMode::kPiecewise) {
    segments.push_back({0, n, mode == CudaGraphMode::kFull});
    return segments;
  }
  for (size_t i = 0; i < n; ++i) {
    const bool captured = !m.pieces(static_cast<int>(i)).is_attention();
    if (!segments.empty() && segments.back().captured == captured) {
      segments.back().last = i + 1;
    } else {
      segments.push_back({i, i + 1, captured});
    }
  }
  return segments;
}

Result<std::unique_ptr<SizeGraphs>> SizeGraphs::capture(const LaunchContext& ctx,
                                                        const GemmPlanSet& plans,
                                                        const std::vector<Segment>& segments,
                                                        int64_t p,
                                                        std::vector<const void*> io_addresses) {
  std::unique_ptr<SizeGraphs> graphs(new SizeGraphs());
  graphs->execs_.assign(segments.size(), nullptr);
  graphs->io_addresses_ = std::move(io_addresses);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!segments[i].captured) continue;
    KILN_ASSIGN_OR_RETURN(graphs->execs_[i], segment_capture(ctx, plans, segments[i], i, p));
  }
  return graphs;
}

Status SizeGraphs::check_addresses(const std::vector<const void*>& now,
                                   const std::vector<std::string>& names, int64_t p) const {
  if (now.size() != io_addresses_.size() || names.size() != now.size())
    return internal_error("debug: the graphs of size " + std::to_string(p) +
                          " were captured with " + std::to_string(io_addresses_.size()) +
                          " static buffers, the executor has " + std::to_string(now.size()));
  for (size_t i = 0; i < now.size(); ++i)
    if (now[i] != io_addresses_[i])
      return internal_error("debug: the graphs of size " + std::to_string(p) +
                            " were captured with '" + names[i] + "' at " +
                            address(io_addresses_[i]) + ", its static buffer is now at " +
                            address(now[i]) + ": a replay would use stale memory");
  return Status::ok_status();
}

size_t SizeGraphs::graph_count() const {
  size_t n = 0;
  for (cudaGraphExec_t e : execs_) n += e != nullptr ? 1 : 0;
  return n;
}

SizeGraphs::~SizeGraphs() {
  for (cudaGraphExec_t exec : execs_)
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
}

Status SizeGraphs::run(const LaunchContext& ctx, const GemmPlanSet& plans,
                       const std::vector<Segment>& segments, int64_t p) const {
  for (size_t i = 0; i < segments.size(); ++i) {
    const Segment& seg = segments[i];
    if (!seg.captured) {
      KILN_RETURN_IF_ERROR(launch_pieces(ctx, plans, seg.first, seg.last, p));
    } else if (execs_[i] != nullptr) {
      KILN_CUDA_TRY(cudaGraphLaunch(execs_[i], ctx.stream),
                    "cudaGraphLaunch for " + segment_label(seg, p));
    }
  }
  return Status::ok_status();
}

}  // namespace kiln::runtime
