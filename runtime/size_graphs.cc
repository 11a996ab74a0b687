#include "runtime/size_graphs.h"

#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "runtime/capture_fault.h"
#include "runtime/cuda_check.h"
#include "runtime/log.h"

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

// Memcpy nodes for `io` added to the captured `graph`: one per input before every root node, one
// per output after every leaf (node handles in `io` order, inputs first; null for an empty
// tensor, which gets none). Their operands are placeholders (the buffer itself) until
// SizeGraphs::prepare_io points them at a request's memory; they are off until then. Then one
// node per host copy before every root node, on for good (not among the handles returned).
Result<std::vector<cudaGraphNode_t>> add_io_nodes(cudaGraph_t graph, const IoPlan& io,
                                                  const std::string& label) {
  size_t n = 0;
  KILN_CUDA_TRY(cudaGraphGetRootNodes(graph, nullptr, &n), "cudaGraphGetRootNodes for " + label);
  std::vector<cudaGraphNode_t> roots(n);
  KILN_CUDA_TRY(cudaGraphGetRootNodes(graph, roots.data(), &n),
                "cudaGraphGetRootNodes for " + label);
  KILN_CUDA_TRY(cudaGraphGetNodes(graph, nullptr, &n), "cudaGraphGetNodes for " + label);
  std::vector<cudaGraphNode_t> nodes(n), leaves;
  KILN_CUDA_TRY(cudaGraphGetNodes(graph, nodes.data(), &n), "cudaGraphGetNodes for " + label);
  for (cudaGraphNode_t node : nodes) {
    size_t dependents = 0;
    KILN_CUDA_TRY(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &dependents),
                  "cudaGraphNodeGetDependentNodes for " + label);
    if (dependents == 0) leaves.push_back(node);
  }
  // A copy node that every root node waits for.
  const auto before_roots = [&](void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                const std::string& what) -> Result<cudaGraphNode_t> {
    cudaGraphNode_t node = nullptr;
    KILN_CUDA_TRY(cudaGraphAddMemcpyNode1D(&node, graph, nullptr, 0, dst, src, bytes, kind),
                  "adding the copy node of " + what + " to " + label);
    for (cudaGraphNode_t root : roots)
      KILN_CUDA_TRY(cudaGraphAddDependencies(graph, &node, &root, nullptr, 1),
                    "cudaGraphAddDependencies for " + label);
    return node;
  };
  std::vector<cudaGraphNode_t> out;
  for (size_t i = 0; i < io.inputs.size(); ++i) {
    cudaGraphNode_t node = nullptr;
    if (io.input_bytes[i] > 0) {
      KILN_ASSIGN_OR_RETURN(node,
                            before_roots(io.inputs[i], io.inputs[i], io.input_bytes[i],
                                         cudaMemcpyDeviceToDevice, "input " + std::to_string(i)));
    }
    out.push_back(node);
  }
  for (size_t i = 0; i < io.host_copies.size(); ++i) {
    const HostCopy& c = io.host_copies[i];
    if (c.bytes > 0)
      KILN_RETURN_IF_ERROR(before_roots(c.dst, c.src, c.bytes, cudaMemcpyHostToDevice,
                                        "host copy " + std::to_string(i))
                               .status());
  }
  for (size_t i = 0; i < io.outputs.size(); ++i) {
    cudaGraphNode_t node = nullptr;
    if (io.output_bytes[i] > 0)
      KILN_CUDA_TRY(
          cudaGraphAddMemcpyNode1D(&node, graph, leaves.data(), leaves.size(), io.outputs[i],
                                   io.outputs[i], io.output_bytes[i], cudaMemcpyDeviceToDevice),
          "adding the copy node of output " + std::to_string(i) + " to " + label);
    out.push_back(node);
  }
  return out;
}

// Captures segment `seg`; `edit` (if any) changes the graph before it is instantiated, and
// `keep` (if any) receives the graph instead of its being destroyed.
Result<cudaGraphExec_t> segment_capture(const LaunchContext& ctx, const GemmPlanSet& plans,
                                        const Segment& seg, size_t index, int64_t p,
                                        const std::function<Status(cudaGraph_t)>& edit = {},
                                        cudaGraph_t* keep = nullptr) {
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
  if (edit) KILN_RETURN_IF_ERROR(edit(graph.graph));
  ExecGuard exec;
  KILN_CUDA_TRY(cudaGraphInstantiate(&exec.exec, graph.graph, 0),
                "cudaGraphInstantiate for " + label);
  KILN_CUDA_TRY(cudaGraphUpload(exec.exec, ctx.stream), "cudaGraphUpload for " + label);
  cudaGraphExec_t out = exec.exec;
  exec.exec = nullptr;
  if (keep != nullptr) {
    *keep = graph.graph;
    graph.graph = nullptr;
  }
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

Result<std::unique_ptr<SizeGraphs>> SizeGraphs::capture(
    const LaunchContext& ctx, const GemmPlanSet& plans, const std::vector<Segment>& segments,
    int64_t p, std::vector<const void*> io_addresses, const IoPlan* io) {
  std::unique_ptr<SizeGraphs> graphs(new SizeGraphs());
  graphs->execs_.assign(segments.size(), nullptr);
  graphs->io_addresses_ = std::move(io_addresses);
  const bool full = segments.size() == 1 && segments[0].captured;
  if (io != nullptr && full) {
    Status with_io = graphs->capture_io(ctx, plans, segments[0], p, *io);
    if (with_io.ok()) return graphs;
    // The graph works without its copy nodes (stream copies, as in the other modes).
    log_warning("size " + std::to_string(p) + ": FULL graph without its copy nodes (" +
                with_io.message() + ")");
    (void)cudaGetLastError();
    graphs->io_nodes_.clear();
    if (graphs->io_graph_ != nullptr) (void)cudaGraphDestroy(graphs->io_graph_);
    graphs->io_graph_ = nullptr;
    if (graphs->execs_[0] != nullptr) (void)cudaGraphExecDestroy(graphs->execs_[0]);
    graphs->execs_[0] = nullptr;
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!segments[i].captured) continue;
    KILN_ASSIGN_OR_RETURN(graphs->execs_[i], segment_capture(ctx, plans, segments[i], i, p));
  }
  return graphs;
}

Status SizeGraphs::capture_io(const LaunchContext& ctx, const GemmPlanSet& plans,
                              const Segment& seg, int64_t p, const IoPlan& io) {
  {
    std::vector<cudaGraphNode_t> nodes;
    auto edit = [&](cudaGraph_t graph) -> Status {
      KILN_ASSIGN_OR_RETURN(nodes, add_io_nodes(graph, io, segment_label(seg, p)));
      return Status::ok_status();
    };
    KILN_ASSIGN_OR_RETURN(execs_[0], segment_capture(ctx, plans, seg, 0, p, edit, &io_graph_));
    if (execs_[0] == nullptr) return Status::ok_status();  // nothing captured: no copy nodes
    for (size_t k = 0; k < nodes.size(); ++k) {
      const bool input = k < io.inputs.size();
      const size_t j = input ? k : k - io.inputs.size();
      IoNode n;
      n.node = nodes[k];
      n.buffer = input ? io.inputs[j] : io.outputs[j];
      n.bytes = input ? io.input_bytes[j] : io.output_bytes[j];
      n.input = input;
      if (n.node != nullptr)
        KILN_CUDA_TRY(cudaGraphNodeSetEnabled(execs_[0], n.node, 0),
                      "turning off a copy node of " + segment_label(seg, p));
      io_nodes_.push_back(n);
    }
  }
  copies_from_host_ = !io.host_copies.empty();
  return Status::ok_status();
}

Result<std::vector<bool>> SizeGraphs::prepare_io(const IoRequest* req) {
  std::vector<bool> copies(io_nodes_.size(), false);
  const size_t inputs = req != nullptr ? req->input_src.size() : 0;
  for (size_t k = 0; k < io_nodes_.size(); ++k) {
    IoNode& n = io_nodes_[k];
    const void* want = nullptr;
    if (req != nullptr && n.node != nullptr) {
      if (n.input && k < inputs) want = req->input_src[k];
      if (!n.input && k - inputs < req->output_dst.size()) want = req->output_dst[k - inputs];
    }
    if (want != nullptr && want == n.other) {
      copies[k] = true;
      continue;
    }
    if (want != nullptr) {
      cudaError_t e =
          n.input ? cudaGraphExecMemcpyNodeSetParams1D(execs_[0], n.node, n.buffer, want, n.bytes,
                                                       cudaMemcpyDeviceToDevice)
                  : cudaGraphExecMemcpyNodeSetParams1D(execs_[0], n.node, const_cast<void*>(want),
                                                       n.buffer, n.bytes, cudaMemcpyDeviceToDevice);
      if (e == cudaSuccess && n.other == nullptr) e = cudaGraphNodeSetEnabled(execs_[0], n.node, 1);
      if (e == cudaSuccess) {
        n.other = want;
        copies[k] = true;
        continue;
      }
      (void)cudaGetLastError();  // refused: this tensor goes through a stream copy
    }
    if (n.other != nullptr) {
      KILN_CUDA_TRY(cudaGraphNodeSetEnabled(execs_[0], n.node, 0), "turning off a copy node");
      n.other = nullptr;
    }
  }
  return copies;
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
  if (io_graph_ != nullptr) (void)cudaGraphDestroy(io_graph_);
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
