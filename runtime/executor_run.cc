// Executor::State::run_core: one validated request — copy in, replay or run eagerly, copy out.
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/executor_state.h"
#include "runtime/io_copy.h"
#include "runtime/log.h"
#include "runtime/size_table.h"

namespace kiln {
namespace {

const char* memory_type_name(cudaMemoryType t) {
  switch (t) {
    case cudaMemoryTypeHost:
      return "pinned host memory";
    case cudaMemoryTypeDevice:
      return "device memory";
    case cudaMemoryTypeManaged:
      return "managed memory";
    default:
      return "not CUDA memory (pageable host memory?)";
  }
}

}  // namespace

Result<std::vector<Executor::State::InputSource>> Executor::State::input_sources(
    const std::vector<const TensorView*>& by_input) const {
  std::vector<InputSource> in;
  for (const TensorView* t : by_input) {
    KILN_RETURN_IF_ERROR(memory_check(t->data, t->memory, "input '" + t->name + "'"));
    in.push_back({t->data, t->memory});
  }
  return in;
}

Status Executor::State::memory_check(const void* ptr, Memory memory,
                                     const std::string& label) const {
  if (memory == Memory::kHost || ptr == nullptr) return Status::ok_status();
  cudaPointerAttributes attr{};
  KILN_CUDA_TRY(cudaPointerGetAttributes(&attr, ptr), "cudaPointerGetAttributes(" + label + ")");
  if (attr.type == cudaMemoryTypeManaged) return Status::ok_status();
  if (attr.type != cudaMemoryTypeDevice)
    return invalid_argument(label + " is marked as device memory but its pointer is " +
                            memory_type_name(attr.type) + "; pass host data as Memory::kHost");
  if (attr.device != ms->device)
    return invalid_argument(label + " is device memory on device " + std::to_string(attr.device) +
                            ", the model is loaded on device " + std::to_string(ms->device));
  return Status::ok_status();
}

std::vector<Tensor> Executor::State::host_outputs(int64_t s,
                                                  std::vector<OutputTarget>* targets) const {
  std::vector<Tensor> out;
  out.reserve(ms->outputs.size());
  for (size_t i = 0; i < ms->outputs.size(); ++i) {
    const TensorInfo& info = ms->outputs[i];
    out.push_back(Tensor::zeros(info.name, info.dtype, info.shape_at(s)));
    targets->push_back({i, out.back().data.data(), Memory::kHost});
  }
  return out;
}

Status Executor::State::run_core(int64_t s, const std::vector<InputSource>& in,
                                 const std::vector<OutputTarget>& out, cudaStream_t caller,
                                 bool async) {
  if (ms->manifest.has_generation())
    return invalid_argument("model '" + ms->manifest.model_name() +
                            "' was compiled for generation (its attention reads a KV cache the "
                            "runtime owns): run it through kiln::Generator (kiln generate)");
  KILN_ASSIGN_OR_RETURN(runtime::SizeChoice choice,
                        runtime::size_choose(captured, model->max_size(), s));
  const int64_t p = choice.padded;
  if (!choice.replay && mode != CudaGraphMode::kNone && !eager_logged) {
    eager_logged = true;
    runtime::log_warning(captured.empty()
                             ? "no captured sizes: running size " + std::to_string(s) + " eagerly"
                             : "size " + std::to_string(s) + " > largest captured size " +
                                   std::to_string(captured.back()) + ": running eagerly");
  }
  runtime::DeviceGuard guard(ms->device);
  KILN_RETURN_IF_ERROR(guard.status());
  Status done = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(const runtime::GemmPlanSet* set, plans_for(p));
    const unsigned char pad = options.debug ? 0xFF : 0;
    if (async) {
      // The caller's work so far (the inputs) before ours.
      KILN_CUDA_TRY(cudaEventRecord(caller_ready, caller),
                    "cudaEventRecord on the caller's stream");
      KILN_CUDA_TRY(cudaStreamWaitEvent(stream, caller_ready, 0), "cudaStreamWaitEvent");
    }
    if (options.debug)
      KILN_CUDA_TRY(cudaMemsetAsync(arena, 0xFF, arena_bytes, stream),
                    "poisoning the arena (debug)");
    // A FULL replay copies device inputs and outputs without padding inside its graph; the
    // rest (host memory, padded rows, a copy the driver refuses) go through stream copies.
    std::vector<bool> in_graph;  // per input, then per output
    runtime::SizeGraphs* graph = nullptr;
    if (auto it = graphs.find(p); choice.replay && it != graphs.end() && it->second->has_io())
      graph = it->second.get();
    if (graph != nullptr) {
      runtime::IoRequest req;
      for (size_t i = 0; i < in.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(runtime::IoGeometry g, runtime::io_geometry(ms->inputs[i], s, p));
        const bool direct = in[i].memory == Memory::kDevice && in[i].data != nullptr &&
                            g.host_row_bytes == g.arena_row_bytes;
        req.input_src.push_back(direct ? in[i].data : nullptr);
      }
      req.output_dst.assign(ms->outputs.size(), nullptr);
      for (const OutputTarget& t : out) {
        KILN_ASSIGN_OR_RETURN(runtime::IoGeometry g,
                              runtime::io_geometry(ms->outputs[t.output], s, p));
        if (t.memory == Memory::kDevice && t.data != nullptr &&
            g.host_row_bytes == g.arena_row_bytes)
          req.output_dst[t.output] = t.data;
      }
      KILN_ASSIGN_OR_RETURN(in_graph, graph->prepare_io(&req));
    }
    const auto copied_in_graph = [&](size_t k) { return k < in_graph.size() && in_graph[k]; };
    for (size_t i = 0; i < in.size(); ++i) {
      if (copied_in_graph(i)) continue;
      const TensorInfo& info = ms->inputs[i];
      KILN_ASSIGN_OR_RETURN(runtime::IoGeometry g, runtime::io_geometry(info, s, p));
      const cudaMemcpyKind kind =
          in[i].memory == Memory::kHost ? cudaMemcpyHostToDevice : cudaMemcpyDefault;
      KILN_RETURN_IF_ERROR(
          runtime::input_copy_in(g, inputs[i], in[i].data, stream, info.name, kind, pad));
    }
    if (run_start != nullptr) KILN_CUDA_TRY(cudaEventRecord(run_start, stream), "cudaEventRecord");
    KILN_RETURN_IF_ERROR(execute(s, p, *set, graph != nullptr));
    if (run_stop != nullptr) KILN_CUDA_TRY(cudaEventRecord(run_stop, stream), "cudaEventRecord");
    for (const OutputTarget& t : out) {
      if (copied_in_graph(in.size() + t.output)) continue;
      const TensorInfo& info = ms->outputs[t.output];
      KILN_ASSIGN_OR_RETURN(runtime::IoGeometry g, runtime::io_geometry(info, s, p));
      const cudaMemcpyKind kind =
          t.memory == Memory::kHost ? cudaMemcpyDeviceToHost : cudaMemcpyDefault;
      KILN_RETURN_IF_ERROR(
          runtime::output_copy_out(g, t.data, outputs[t.output], stream, info.name, kind));
    }
    if (async) {
      // The caller's later work after ours.
      KILN_CUDA_TRY(cudaEventRecord(run_done, stream), "cudaEventRecord");
      KILN_CUDA_TRY(cudaStreamWaitEvent(caller, run_done, 0),
                    "cudaStreamWaitEvent on the caller's stream");
    }
    if (!async || run_start != nullptr)
      KILN_CUDA_TRY(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return Status::ok_status();
  }();
  if (!done.ok()) {
    (void)cudaStreamSynchronize(stream);  // nothing may still write into the caller's memory
    (void)cudaGetLastError();
    return done.with_context("running size " + std::to_string(s) + " (padded to " +
                             std::to_string(p) + (choice.replay ? ", graph replay)" : ", eager)"));
  }
  if (run_start != nullptr) {
    float elapsed = 0.0f;
    KILN_CUDA_TRY(cudaEventElapsedTime(&elapsed, run_start, run_stop), "cudaEventElapsedTime");
    stats.last_device_ms = elapsed;
  }
  if (choice.replay) {
    ++stats.graph_replays;
  } else {
    ++stats.eager_runs;
  }
  return Status::ok_status();
}

}  // namespace kiln
