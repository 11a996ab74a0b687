// CUDA graphs of one padded size. The program is cut into segments — runs of consecutive
// pieces — each either captured as one graph or launched eagerly: FULL captures one segment of
// every piece, PIECEWISE one per maximal run of non-attention pieces (attention pieces run
// eagerly in between), NONE captures nothing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/status.h"
#include "kiln/model.h"
#include "runtime/launch_program.h"

namespace kiln::runtime {

struct Segment {
  size_t first = 0;  // pieces [first, last)
  size_t last = 0;
  bool captured = false;
};

// Pure; `mode` is the effective mode (after downgrades): kNone, kPiecewise or kFull.
std::vector<Segment> segments_for_mode(const schema::Manifest& m, CudaGraphMode mode);

// A copy from pinned host memory that a FULL graph makes itself on every replay, before its
// first nodes: it reads `src` when the node runs, so the host fills `src` before the launch and
// leaves it alone until the replay has finished.
struct HostCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// The static buffers a FULL graph copies its inputs into and its outputs out of, for memcpy
// nodes inside it (SizeGraphs::prepare_io): each buffer and its bytes at the capture size. And
// the fixed host copies it makes on every replay (generation's decode steps: the step inputs and
// the KV images from their pinned staging).
struct IoPlan {
  std::vector<void*> inputs, outputs;
  std::vector<size_t> input_bytes, output_bytes;
  std::vector<HostCopy> host_copies;
};

// One request's copies for the I/O nodes: per input its source (null: the node stays off and
// the caller copies on the stream), per output its destination (null likewise). Only
// contiguous device (or managed) memory of the buffer's exact byte count qualifies.
struct IoRequest {
  std::vector<const void*> input_src;
  std::vector<void*> output_dst;
};

class SizeGraphs {
 public:
  // Captures every captured segment at size p (cudaStreamCaptureModeThreadLocal) and
  // instantiates and uploads it. Errors name the size, the pieces and the failing step; a
  // failed capture is always ended, so the stream is usable (and destroyable) afterwards.
  // `io_addresses` are the static input/output buffers the graphs read and write, recorded for
  // check_addresses.
  // With `io` (FULL only: one captured segment of every piece), the graph also gets a memcpy
  // node per input before its first nodes and per output after its last, off until
  // prepare_io turns them on, and one always-on node per host copy before its first nodes.
  // Should the driver refuse the nodes, the graph is captured again without them (a warning):
  // has_io() and copies_from_host() then say false, and the caller copies on the stream.
  static Result<std::unique_ptr<SizeGraphs>> capture(
      const LaunchContext& ctx, const GemmPlanSet& plans, const std::vector<Segment>& segments,
      int64_t p, std::vector<const void*> io_addresses, const IoPlan* io = nullptr);
  ~SizeGraphs();
  SizeGraphs(const SizeGraphs&) = delete;
  SizeGraphs& operator=(const SizeGraphs&) = delete;

  // Replays the captured segments and launches the others eagerly, in program order.
  Status run(const LaunchContext& ctx, const GemmPlanSet& plans,
             const std::vector<Segment>& segments, int64_t p) const;

  // Debug-mode guard: internal_error naming the tensor when a static buffer is no longer where
  // the graphs were captured (`names` label `now`, in the same order as at capture).
  Status check_addresses(const std::vector<const void*>& now, const std::vector<std::string>& names,
                         int64_t p) const;

  size_t graph_count() const;  // instantiated graphs (segments that captured something)

  bool has_io() const { return !io_nodes_.empty(); }
  // Whether every replay makes the IoPlan's host copies itself.
  bool copies_from_host() const { return copies_from_host_; }
  // Sets the I/O nodes for the next replays: each node whose request is non-null copies from
  // (input) or to (output) it, every other node is off; null `req`: all off. Only changed
  // nodes are touched. Returns, per input then per output, whether its node copies; a node the
  // driver refuses to repoint (e.g. other memory) is turned off and reported false, so the
  // caller copies that tensor on the stream instead.
  Result<std::vector<bool>> prepare_io(const IoRequest* req);

 private:
  SizeGraphs() = default;
  // The FULL segment `seg` captured with copy nodes for `io` (execs_[0], io_graph_, io_nodes_).
  Status capture_io(const LaunchContext& ctx, const GemmPlanSet& plans, const Segment& seg,
                    int64_t p, const IoPlan& io);
  struct IoNode {
    cudaGraphNode_t node = nullptr;
    void* buffer = nullptr;  // the static buffer
    size_t bytes = 0;
    bool input = true;
    const void* other = nullptr;  // the caller's side the node points at now; null: off
  };
  std::vector<cudaGraphExec_t> execs_;  // one per segment; null: eager, or captured nothing
  std::vector<const void*> io_addresses_;
  cudaGraph_t io_graph_ = nullptr;  // kept alive with I/O nodes: their handles index it
  std::vector<IoNode> io_nodes_;    // inputs, then outputs
  bool copies_from_host_ = false;
};

}  // namespace kiln::runtime
