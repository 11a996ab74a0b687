// kiln::Executor: one stream, one activation arena, static input/output buffers inside it, and
// the CUDA graphs of every capture size, captured at creation (largest first) in one graph mode.
// run() pads the request up to the smallest captured size >= its size, replays, and returns
// exactly the requested rows; sizes above the largest capture size run eagerly.
// Thread safety: every method may be called from any thread; run(), time_device() and stats()
// take the executor's lock, so concurrent calls on one executor serialise (use one executor per
// thread for parallelism — they share the Model's weights). The destructor waits for the calls
// other threads are running on the executor; a call that starts while it runs returns
// failed_precondition. See runtime/README.md.
// Device faults: after a kernel faults (the CUDA context is lost for the whole process),
// create(), run() and time_device() return StatusCode::kContextLost naming the first CUDA
// error, without calling CUDA; restart the process (runtime/README.md, "Device faults").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/status.h"
#include "kiln/export.h"
#include "kiln/model.h"
#include "kiln/tensor.h"

namespace kiln {

namespace runtime {
struct KvCacheDeviceOptions;  // internal
}

struct ExecutorOptions {
  std::optional<CudaGraphMode> mode;  // default: the mode the artifact was compiled with
  // Poison the arena and the input padding rows with 0xFF bytes (NaN) before each run, and
  // check before each replay that the static buffers are where the graphs were captured.
  bool debug = false;
  // Record CUDA events around the device work of each run(): stats().last_device_ms.
  bool time_runs = false;
  // Called after each size is captured at creation (decode graphs and mixed ones count
  // separately), with the size, how many captures are done and how many there are in all, on
  // the creating thread. For progress displays.
  std::function<void(int64_t size, size_t done, size_t total)> capture_progress = nullptr;
};

struct ExecutorStats {
  int64_t graph_replays = 0;
  int64_t eager_runs = 0;      // launch program run without a graph (NONE, or size > captures)
  double last_device_ms = -1;  // replay or eager launches of the last run (time_runs), else -1
};

// One captured size, in capture order.
struct SizeCapture {
  int64_t size = 0;
  size_t graphs = 0;         // instantiated graphs (FULL: 1; PIECEWISE: one per captured segment)
  double ms = 0;             // GEMM plans, warm-up run, capture, instantiate, upload
  int64_t device_bytes = 0;  // cudaMemGetInfo delta around capture + instantiate + upload
};

// What creating the executor did and cost.
struct CaptureReport {
  CudaGraphMode requested = CudaGraphMode::kNone;
  CudaGraphMode effective = CudaGraphMode::kNone;
  std::string downgrade_reason;  // why effective != requested (also logged); empty otherwise
  double total_ms = 0;           // all of Executor::create
  double capture_ms = 0;         // the sum of sizes[].ms
  std::vector<SizeCapture> sizes;
  uint64_t arena_bytes = 0;      // one arena shared by every size (planned for max_size)
  uint64_t workspace_bytes = 0;  // the GEMM workspace
  // The sum of sizes[].device_bytes: what the graphs cost on top of the arena. cudaMemGetInfo
  // is device-wide with driver-page granularity (2 MiB), so one size may read 0 and another a
  // page; graph_device_bytes / sizes.size() is the per-size figure to quote. Other work on the
  // device at the same time distorts it.
  int64_t graph_device_bytes = 0;
};

class Executor {
 public:
  KILN_API static Result<std::unique_ptr<Executor>> create(std::shared_ptr<const Model> model,
                                                           ExecutorOptions options = {});
  KILN_API ~Executor();

  // Host tensors in (by name, any order, all sharing one size S in [1, max_size]), host tensors
  // out. Synchronous.
  KILN_API Result<std::vector<Tensor>> run(const std::vector<Tensor>& inputs);
  // Views of caller memory in (device memory: copied device-to-device into the static buffers
  // on the executor's stream — zero host copies), host tensors out. Synchronous. The executor's
  // stream does not wait for other streams: device inputs must be complete when run() is called
  // (synchronise the stream or event that wrote them; a cudaMemcpy from pageable host memory
  // may return before its DMA lands).
  KILN_API Result<std::vector<Tensor>> run(const std::vector<TensorView>& inputs);
  // Views in, caller buffers out (any subset of the outputs, by name; with device inputs and
  // device outputs nothing touches the host). Capacities are checked before anything runs; on
  // success each output's shape is set. Synchronous.
  KILN_API Status run(const std::vector<TensorView>& inputs, std::vector<OutputView>& outputs);
  // The same, ordered on the caller's CUDA stream `stream` (a cudaStream_t; 0 is the legacy
  // default stream) instead of waiting: kiln's work starts after everything enqueued on `stream`
  // before the call, anything enqueued on `stream` after the call starts after kiln's work, and
  // the call returns without waiting for the device (output shapes are set on return; the data
  // lands in stream order). Inputs and outputs must be device memory. A device fault of the run
  // surfaces on the caller's stream and at the executor's next call. With
  // ExecutorOptions::time_runs it waits for the run (stats().last_device_ms reads the events).
  KILN_API Status run_async(const std::vector<TensorView>& inputs, std::vector<OutputView>& outputs,
                            void* stream);

  KILN_API CudaGraphMode mode() const;                          // after any downgrade
  KILN_API const std::vector<int64_t>& captured_sizes() const;  // ascending
  KILN_API const CaptureReport& capture_report() const;
  KILN_API ExecutorStats stats() const;

  // Replays (or eagerly runs) the program for padded size `s` `iters` times on the inputs
  // already in the static buffers; returns the median milliseconds per run (device events).
  KILN_API Result<double> time_device(int64_t s, int iters);

 private:
  friend class Generator;  // drives the executor's launch program step by step
  struct State;
  explicit Executor(std::unique_ptr<State> state);
  // run(views, outputs) and run_async: `api` names the call in errors.
  Status run_views(const char* api, const std::vector<TensorView>& inputs,
                   std::vector<OutputView>& outputs, bool async, void* stream);
  // create(), with the KV-cache overrides of a generation model (`kv`: may be null).
  static Result<std::unique_ptr<Executor>> create_with(std::shared_ptr<const Model> model,
                                                       ExecutorOptions options,
                                                       const runtime::KvCacheDeviceOptions* kv);
  std::unique_ptr<State> state_;
};

}  // namespace kiln
