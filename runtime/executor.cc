#include "kiln/executor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <string>
#include <utility>

#include "runtime/context_lost.h"
#include "runtime/cuda_check.h"
#include "runtime/executor_state.h"
#include "runtime/input_validate.h"
#include "runtime/log.h"
#include "runtime/median.h"
#include "runtime/mode_resolve.h"
#include "runtime/status_guard.h"

namespace kiln {
namespace {

}  // namespace

Executor::Executor(std::unique_ptr<State> state) : state_(std::move(state)) {}
Executor::~Executor() {
  if (state_ != nullptr) state_->gate.close();  // wait for calls running on other threads
}

Result<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const Model> model,
                                                   ExecutorOptions options) {
  return create_with(std::move(model), options, nullptr);
}

Result<std::unique_ptr<Executor>> Executor::create_with(std::shared_ptr<const Model> model,
                                                        ExecutorOptions options,
                                                        const runtime::KvCacheDeviceOptions* kv) {
  return runtime::status_guard("Executor::create", [&]() -> Result<std::unique_ptr<Executor>> {
    const auto t0 = std::chrono::steady_clock::now();
    KILN_RETURN_IF_ERROR(runtime::context_lost_check());
    if (model == nullptr) return invalid_argument("Executor::create: the model is null");
    if (options.mode && !cuda_graph_mode_valid(*options.mode))
      return invalid_argument("Executor::create: unknown graph mode " +
                              std::to_string(static_cast<int>(*options.mode)));
    auto state = std::make_unique<State>();
    state->model = std::move(model);
    state->ms = &state->model->state();
    state->options = options;
    if (kv != nullptr) state->kv_options = *kv;
    const runtime::GraphModeChoice choice = runtime::graph_mode_resolve(
        options.mode.value_or(state->ms->mode), runtime::graph_mode_facts(state->ms->manifest));
    if (!choice.reason.empty()) runtime::log_warning(choice.reason);
    state->mode = choice.effective;
    state->report.requested = choice.requested;
    state->report.effective = choice.effective;
    state->report.downgrade_reason = choice.reason;
    runtime::DeviceGuard guard(state->ms->device);
    KILN_RETURN_IF_ERROR(guard.status());
    Status init = state->init();
    if (!init.ok())
      return init.with_context("creating an executor (mode " +
                               std::string(cuda_graph_mode_name(state->mode)) + ")");
    state->report.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return std::unique_ptr<Executor>(new Executor(std::move(state)));
  });
}

CudaGraphMode Executor::mode() const { return state_->mode; }
const std::vector<int64_t>& Executor::captured_sizes() const { return state_->captured; }
const CaptureReport& Executor::capture_report() const { return state_->report; }

ExecutorStats Executor::stats() const {
  runtime::CallPass pass(state_->gate, "Executor::stats", "executor");
  if (!pass.admitted()) return {};
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->stats;
}

Result<std::vector<Tensor>> Executor::run(const std::vector<Tensor>& inputs) {
  return runtime::status_guard("Executor::run", [&]() -> Result<std::vector<Tensor>> {
    State& st = *state_;
    runtime::CallPass pass(st.gate, "Executor::run", "executor");
    KILN_RETURN_IF_ERROR(pass.device_status());
    std::lock_guard<std::mutex> lock(st.mu);
    KILN_ASSIGN_OR_RETURN(runtime::InputBinding binding,
                          runtime::inputs_validate(st.ms->inputs, inputs, st.model->max_size()));
    std::vector<State::InputSource> in;
    for (const Tensor* t : binding.by_input) in.push_back({t->data.data(), Memory::kHost});
    std::vector<State::OutputTarget> targets;
    std::vector<Tensor> outputs = st.host_outputs(binding.size, &targets);
    KILN_RETURN_IF_ERROR(st.run_core(binding.size, in, targets));
    return outputs;
  });
}

Result<std::vector<Tensor>> Executor::run(const std::vector<TensorView>& inputs) {
  return runtime::status_guard("Executor::run", [&]() -> Result<std::vector<Tensor>> {
    State& st = *state_;
    runtime::CallPass pass(st.gate, "Executor::run", "executor");
    KILN_RETURN_IF_ERROR(pass.device_status());
    std::lock_guard<std::mutex> lock(st.mu);
    KILN_ASSIGN_OR_RETURN(runtime::ViewBinding binding,
                          runtime::inputs_validate(st.ms->inputs, inputs, st.model->max_size()));
    runtime::DeviceGuard guard(st.ms->device);
    KILN_RETURN_IF_ERROR(guard.status());
    KILN_ASSIGN_OR_RETURN(std::vector<State::InputSource> in, st.input_sources(binding.by_input));
    std::vector<State::OutputTarget> targets;
    std::vector<Tensor> outputs = st.host_outputs(binding.size, &targets);
    KILN_RETURN_IF_ERROR(st.run_core(binding.size, in, targets));
    return outputs;
  });
}

Status Executor::run(const std::vector<TensorView>& inputs, std::vector<OutputView>& outputs) {
  return run_views("Executor::run", inputs, outputs, false, nullptr);
}

Status Executor::run_async(const std::vector<TensorView>& inputs, std::vector<OutputView>& outputs,
                           void* stream) {
  return run_views("Executor::run_async", inputs, outputs, true, stream);
}

Status Executor::run_views(const char* api, const std::vector<TensorView>& inputs,
                           std::vector<OutputView>& outputs, bool async, void* stream) {
  return runtime::status_guard(api, [&]() -> Status {
    State& st = *state_;
    runtime::CallPass pass(st.gate, api, "executor");
    KILN_RETURN_IF_ERROR(pass.device_status());
    std::lock_guard<std::mutex> lock(st.mu);
    KILN_ASSIGN_OR_RETURN(runtime::ViewBinding binding,
                          runtime::inputs_validate(st.ms->inputs, inputs, st.model->max_size()));
    const int64_t s = binding.size;
    KILN_ASSIGN_OR_RETURN(std::vector<size_t> index,
                          runtime::outputs_validate(st.ms->outputs, outputs, s));
    runtime::DeviceGuard guard(st.ms->device);
    KILN_RETURN_IF_ERROR(guard.status());
    KILN_ASSIGN_OR_RETURN(std::vector<State::InputSource> in, st.input_sources(binding.by_input));
    std::vector<State::OutputTarget> targets;
    for (size_t g = 0; g < outputs.size(); ++g) {
      OutputView& o = outputs[g];
      KILN_RETURN_IF_ERROR(st.memory_check(o.data, o.memory, "output '" + o.name + "'"));
      targets.push_back({index[g], o.data, o.memory});
    }
    if (async) {
      // Host memory would be read or written after the call returned.
      const auto host = [&](const std::string& what) {
        return invalid_argument(std::string(api) + ": " + what +
                                " is host memory; a run ordered on a stream takes device memory "
                                "only (use run() for host tensors)");
      };
      for (const TensorView& v : inputs)
        if (v.memory == Memory::kHost) return host("input '" + v.name + "'");
      for (const OutputView& o : outputs)
        if (o.memory == Memory::kHost) return host("output '" + o.name + "'");
    }
    KILN_RETURN_IF_ERROR(
        st.run_core(s, in, targets, async ? static_cast<cudaStream_t>(stream) : nullptr, async));
    for (size_t g = 0; g < outputs.size(); ++g)
      outputs[g].shape = st.ms->outputs[index[g]].shape_at(s);
    return Status::ok_status();
  });
}

Result<double> Executor::time_device(int64_t s, int iters) {
  return runtime::status_guard("Executor::time_device", [&]() -> Result<double> {
    State& st = *state_;
    runtime::CallPass pass(st.gate, "Executor::time_device", "executor");
    KILN_RETURN_IF_ERROR(pass.device_status());
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
      for (int i = 0; i < 3; ++i) KILN_RETURN_IF_ERROR(st.execute(s, s, *plans));
      for (int i = 0; i < iters; ++i) {
        KILN_CUDA_TRY(cudaEventRecord(ev.start, st.stream), what + " (cudaEventRecord)");
        KILN_RETURN_IF_ERROR(st.execute(s, s, *plans));
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
    return runtime::median(std::move(ms));
  });
}

}  // namespace kiln
