// Executor::State: what one executor owns — stream, arena (with the static input/output buffers
// in it), GEMM workspace, GEMM plans per size, CUDA graphs per capture size — and the operations
// the public methods share. init() (executor_state.cc) allocates and captures; run_core()
// (executor_run.cc) moves one request through.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/executor.h"
#include "runtime/call_gate.h"
#include "runtime/gemm_plan.h"
#include "runtime/kv_cache_device.h"
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
  // run_async: recorded on the caller's stream (the executor's stream waits for it) and behind
  // the run on the executor's stream (the caller's stream waits for it).
  cudaEvent_t caller_ready = nullptr, run_done = nullptr;
  cudaEvent_t run_start = nullptr;  // time_runs only
  cudaEvent_t run_stop = nullptr;

  // The request's real size s for kernels bound to KernelArg.real_size_ptr (allocated only when
  // some step has one): a device int64, written from a pinned host slot on `stream` before
  // each run (real_size_write); `real_size_copied` is recorded behind each such copy.
  int64_t* real_size_dev = nullptr;
  int64_t* real_size_host = nullptr;
  cudaEvent_t real_size_copied = nullptr;
  int64_t real_size_on_device = -1;  // the size the last enqueued copy wrote (-1: none yet)

  std::vector<void*> inputs;          // static buffer of each model input (in the arena)
  std::vector<void*> outputs;         // static buffer of each model output
  std::vector<std::string> io_names;  // "input 'x'", ..., "output 'z'", ... for messages

  std::map<int64_t, runtime::GemmPlanSet> plans;                   // by padded size
  // The mixed route (every run() and generation's prefill steps): mixed_mode(mode)'s graphs.
  std::map<int64_t, std::unique_ptr<runtime::SizeGraphs>> graphs;  // by capture size
  std::vector<int64_t> captured;                                   // ascending
  // The decode route of the tuple modes (FULL_DECODE_ONLY, FULL_AND_PIECEWISE, generation
  // models only): FULL graphs of the capture sizes up to the largest decode batch. Empty
  // otherwise, and decode steps take the mixed route.
  std::vector<runtime::Segment> decode_segments;
  std::map<int64_t, std::unique_ptr<runtime::SizeGraphs>> decode_graphs;
  std::vector<int64_t> decode_captured;  // ascending
  CaptureReport report;

  // Generation models (manifest.generation): the paged KV cache the attention steps read and
  // write, sized by kv_options (the Generator sets max_blocks / memory_fraction overrides
  // before init).
  std::unique_ptr<runtime::KvCacheDevice> kv;
  runtime::KvCacheDeviceOptions kv_options;
  // Generation models: a pinned host image of each input at max_size (zeroed), in one
  // allocation. The Generator writes a step's inputs there; a decode graph copies them, and the
  // KV images, itself (SizeGraphs::copies_from_host), else the Generator copies on the stream.
  char* host_inputs_block = nullptr;
  std::vector<void*> host_inputs;

  ExecutorStats stats;
  bool eager_logged = false;
  mutable std::mutex mu;  // run(), time_device() and stats() are serialised
  // Entered by those methods before mu; ~Executor closes it, so it waits for them.
  mutable runtime::CallGate gate;

  struct InputSource {
    const void* data = nullptr;  // S rows, caller memory
    Memory memory = Memory::kHost;
  };
  struct OutputTarget {
    size_t output = 0;  // model output index
    void* data = nullptr;
    Memory memory = Memory::kHost;
  };

  ~State();
  // `decode_route`: launches on the decode route (decode_graphs), LaunchContext::decode_route.
  runtime::LaunchContext context(bool decode_route = false) const;
  // The GEMM plans for size p, made on first use (with the algorithms chosen at load).
  Result<const runtime::GemmPlanSet*> plans_for(int64_t p);
  // The whole program for a request of real size s padded to p: writes s to the device slot,
  // then graph replay when p is captured, else eager. `io_prepared`: run_core has set the
  // graph's copy nodes for this request (SizeGraphs::prepare_io); otherwise they are turned off.
  Status execute(int64_t s, int64_t p, const runtime::GemmPlanSet& plans, bool io_prepared = false);
  // Same as execute, on the decode route when it exists (generation's decode steps).
  Status execute_decode(int64_t s, int64_t p, const runtime::GemmPlanSet& plans);
  // Enqueues the copy of s into real_size_dev on `stream` (a no-op without the slot).
  Status real_size_write(int64_t s);
  // Allocations, plans and (per mode) warm-up + capture of every capture size, largest first.
  Status init();
  // One request of size s (validated): inputs by model input index, the outputs wanted.
  // With `async`, the run is ordered on the caller's stream `caller` (events both ways) and
  // returns without waiting for the device (unless time_runs).
  Status run_core(int64_t s, const std::vector<InputSource>& in,
                  const std::vector<OutputTarget>& out, cudaStream_t caller = nullptr,
                  bool async = false);
  // Host tensors for every model output at size s, and the targets run_core writes them through.
  std::vector<Tensor> host_outputs(int64_t s, std::vector<OutputTarget>* targets) const;
  // invalid_argument unless `ptr` is memory of the kind claimed, on this executor's device.
  Status memory_check(const void* ptr, Memory memory, const std::string& label) const;
  // The sources of validated view inputs, each checked with memory_check.
  Result<std::vector<InputSource>> input_sources(
      const std::vector<const TensorView*>& by_input) const;

 private:
  Status capture_size(int64_t p, bool decode);
  Status real_size_init();
  Status kv_init();
  Status host_inputs_init();  // kv_init's second half: host_inputs
  std::vector<const void*> io_addresses() const;
};

}  // namespace kiln
