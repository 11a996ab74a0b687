#include "runtime/executor.h"

#include <algorithm>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "runtime/cuda_check.h"
#include "runtime/executor_state.h"
#include "runtime/input_validate.h"
#include "runtime/io_copy.h"
#include "runtime/log.h"

namespace kiln {
namespace {

// KV-cache decode does not exist yet, so the decode-graph modes fall back (with a logged reason).
CudaGraphMode mode_downgrade(CudaGraphMode requested) {
  if (requested == CudaGraphMode::kFullAndPiecewise) {
    runtime::log_warning(
        "graph mode FULL_AND_PIECEWISE needs KV-cache decode, which this runtime does not have "
        "yet: using PIECEWISE");
    return CudaGraphMode::kPiecewise;
  }
  if (requested == CudaGraphMode::kFullDecodeOnly) {
    runtime::log_warning(
        "graph mode FULL_DECODE_ONLY needs KV-cache decode, which this runtime does not have "
        "yet: using NONE (no graphs)");
    return CudaGraphMode::kNone;
  }
  return requested;
}

template <typename F>
auto guarded(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return resource_exhausted(std::string("out of host memory in ") + what);
  } catch (const std::exception& e) {
    return internal_error(std::string(what) + ": " + e.what());
  }
}

}  // namespace

Executor::Executor(std::unique_ptr<State> state) : state_(std::move(state)) {}
Executor::~Executor() = default;

Result<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const Model> model,
                                                   ExecutorOptions options) {
  return guarded("Executor::create", [&]() -> Result<std::unique_ptr<Executor>> {
    if (model == nullptr) return invalid_argument("Executor::create: the model is null");
    if (options.mode && std::string(cuda_graph_mode_name(*options.mode)) == "UNKNOWN")
      return invalid_argument("Executor::create: unknown graph mode " +
                              std::to_string(static_cast<int>(*options.mode)));
    auto state = std::make_unique<State>();
    state->model = std::move(model);
    state->ms = &state->model->state();
    state->options = options;
    state->mode = mode_downgrade(options.mode.value_or(state->ms->mode));
    runtime::DeviceGuard guard(state->ms->device);
    KILN_RETURN_IF_ERROR(guard.status());
    Status init = state->init();
    if (!init.ok())
      return init.with_context("creating an executor (mode " +
                               std::string(cuda_graph_mode_name(state->mode)) + ")");
    return std::unique_ptr<Executor>(new Executor(std::move(state)));
  });
}

CudaGraphMode Executor::mode() const { return state_->mode; }
const std::vector<int64_t>& Executor::captured_sizes() const { return state_->captured; }

ExecutorStats Executor::stats() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

Result<std::vector<Tensor>> Executor::run(const std::vector<Tensor>& inputs) {
  return guarded("Executor::run", [&]() -> Result<std::vector<Tensor>> {
    State& st = *state_;
    std::lock_guard<std::mutex> lock(st.mu);
    const runtime::ModelState& ms = *st.ms;
    KILN_ASSIGN_OR_RETURN(runtime::InputBinding binding,
                          runtime::inputs_validate(ms.inputs, inputs, st.model->max_size()));
    const int64_t s = binding.size;
    auto up = std::lower_bound(st.captured.begin(), st.captured.end(), s);
    const bool replay = up != st.captured.end();
    const int64_t p = replay ? *up : s;
    if (!replay && st.mode != CudaGraphMode::kNone && !st.eager_logged) {
      st.eager_logged = true;
      runtime::log_warning(st.captured.empty()
                               ? "no captured sizes: running size " + std::to_string(s) + " eagerly"
                               : "size " + std::to_string(s) + " > largest captured size " +
                                     std::to_string(st.captured.back()) + ": running eagerly");
    }
    runtime::DeviceGuard guard(ms.device);
    KILN_RETURN_IF_ERROR(guard.status());
    std::vector<Tensor> outputs;
    outputs.reserve(ms.outputs.size());
    Status done = [&]() -> Status {
      KILN_ASSIGN_OR_RETURN(const runtime::GemmPlanSet* plans, st.plans_for(p));
      if (st.options.debug)
        KILN_CUDA_TRY(cudaMemsetAsync(st.arena, 0xFF, st.arena_bytes, st.stream),
                      "poisoning the arena (debug)");
      for (size_t i = 0; i < ms.inputs.size(); ++i) {
        const TensorInfo& info = ms.inputs[i];
        KILN_ASSIGN_OR_RETURN(runtime::IoGeometry g, runtime::io_geometry(info, s, p));
        void* dst = ms.buffer_ptr(st.arena, ms.manifest.inputs(static_cast<int>(i)).buffer());
        KILN_RETURN_IF_ERROR(
            runtime::input_copy_in(g, dst, binding.by_input[i]->data.data(), st.stream, info.name));
      }
      KILN_RETURN_IF_ERROR(st.execute(p, *plans));
      for (size_t i = 0; i < ms.outputs.size(); ++i) {
        const TensorInfo& info = ms.outputs[i];
        outputs.push_back(Tensor::zeros(info.name, info.dtype, info.shape_at(s)));
        KILN_ASSIGN_OR_RETURN(runtime::IoGeometry g, runtime::io_geometry(info, s, p));
        const void* src =
            ms.buffer_ptr(st.arena, ms.manifest.outputs(static_cast<int>(i)).buffer());
        KILN_RETURN_IF_ERROR(
            runtime::output_copy_out(g, outputs.back().data.data(), src, st.stream, info.name));
      }
      KILN_CUDA_TRY(cudaStreamSynchronize(st.stream), "running size " + std::to_string(s) +
                                                          " (padded to " + std::to_string(p) +
                                                          ", cudaStreamSynchronize)");
      return Status::ok_status();
    }();
    if (!done.ok()) {
      (void)cudaStreamSynchronize(st.stream);  // nothing may still write into `outputs`
      (void)cudaGetLastError();
      return done.with_context("running size " + std::to_string(s));
    }
    if (replay) {
      ++st.stats.graph_replays;
    } else {
      ++st.stats.eager_runs;
    }
    return outputs;
  });
}

Result<double> Executor::time_device(int64_t s, int iters) {
  return guarded("Executor::time_device", [&]() -> Result<double> {
    State& st = *state_;
    std::lock_guard<std::mutex> lock(st.mu);
    if (iters < 1) return invalid_argument("time_device: iters is " + std::to_string(iters));
    if (s < 1 || s > st.model->max_size())
      return invalid_argument("time_device: size " + std::to_string(s) + " is outside [1, " +
                              std::to_string(st.model->max_size()) + "]");
    runtime::DeviceGuard guard(st.ms->device);
    KILN_RETURN_IF_ERROR(guard.status());
    KILN_ASSIGN_OR_RETURN(const runtime::GemmPlanSet* plans, st.plans_for(s));
    struct Events {
      cudaEvent_t start = nullptr, stop = nullptr;
      ~Events() {
        if (start != nullptr) (void)cudaEventDestroy(start);
        if (stop != nullptr) (void)cudaEventDestroy(stop);
      }
    } ev;
    KILN_CUDA_TRY(cudaEventCreate(&ev.start), "cudaEventCreate");
    KILN_CUDA_TRY(cudaEventCreate(&ev.stop), "cudaEventCreate");
    const std::string what = "timing size " + std::to_string(s);
    std::vector<double> ms;
    Status done = [&]() -> Status {
      for (int i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(st.execute(s, *plans));
      for (int i = 0; i < iters; ++i) {
        KILN_CUDA_TRY(cudaEventRecord(ev.start, st.stream), what + " (cudaEventRecord)");
        KILN_RETURN_IF_ERROR(st.execute(s, *plans));
        KILN_CUDA_TRY(cudaEventRecord(ev.stop, st.stream), what + " (cudaEventRecord)");
        KILN_CUDA_TRY(cudaEventSynchronize(ev.stop), what + " (cudaEventSynchronize)");
        float elapsed = 0.0f;
        KILN_CUDA_TRY(cudaEventElapsedTime(&elapsed, ev.start, ev.stop),
                      what + " (cudaEventElapsedTime)");
        ms.push_back(elapsed);
      }
      return Status::ok_status();
    }();
    if (!done.ok()) {
      (void)cudaStreamSynchronize(st.stream);
      (void)cudaGetLastError();
      return done.with_context(what);
    }
    std::sort(ms.begin(), ms.end());
    const size_t n = ms.size();
    return n % 2 == 1 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  });
}

}  // namespace kiln
