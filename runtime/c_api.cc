// The C API (runtime/include/kiln/runtime.h) over the C++ one: models and executors (generators:
// c_api_generator.cc). Every entry point catches every exception; errors become a kiln_status
// plus this thread's last-error message (c_api_support.h).
#include <memory>
#include <cstring>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "kiln/executor.h"
#include "runtime/c_api_support.h"
#include "runtime/call_gate.h"

struct kiln_executor {
  std::shared_ptr<const kiln::Model> model;
  std::unique_ptr<kiln::Executor> executor;
  // kiln_executor_run enters it before reading anything; kiln_executor_free closes it first.
  kiln::runtime::CallGate gate;
};

static_assert(KILN_INVALID_ARGUMENT == static_cast<int>(kiln::StatusCode::kInvalidArgument) &&
              KILN_FAILED_PRECONDITION == static_cast<int>(kiln::StatusCode::kFailedPrecondition) &&
              KILN_IO_ERROR == static_cast<int>(kiln::StatusCode::kIoError) &&
              KILN_CONTEXT_LOST == static_cast<int>(kiln::StatusCode::kContextLost));
static_assert(KILN_DTYPE_F32 == static_cast<int>(kiln::DType::kF32) &&
              KILN_DTYPE_BOOL == static_cast<int>(kiln::DType::kBool));
static_assert(KILN_GRAPH_MODE_NONE == static_cast<int>(kiln::CudaGraphMode::kNone) &&
              KILN_GRAPH_MODE_FULL == static_cast<int>(kiln::CudaGraphMode::kFull) &&
              KILN_GRAPH_MODE_FULL_AND_PIECEWISE ==
                  static_cast<int>(kiln::CudaGraphMode::kFullAndPiecewise));

namespace {

using kiln::Status;
using kiln::capi::guarded;
using kiln::capi::null_arg;

Status info_fill(const kiln::TensorInfo& t, kiln_tensor_info* out) {
  if (t.dims.size() > KILN_MAX_RANK)
    return kiln::unimplemented("'" + t.name + "' has " + std::to_string(t.dims.size()) +
                               " dims; the C API carries at most KILN_MAX_RANK (" +
                               std::to_string(KILN_MAX_RANK) + ")");
  *out = kiln_tensor_info{};
  out->name = t.name.c_str();
  out->dtype = static_cast<int32_t>(t.dtype);
  out->rank = static_cast<int32_t>(t.dims.size());
  out->size_axis = t.size_axis;
  for (size_t d = 0; d < t.dims.size(); ++d) {
    out->coef[d] = t.dims[d].coef;
    out->offset[d] = t.dims[d].offset;
  }
  return Status::ok_status();
}

// The fields every kiln_tensor needs, whether input or output.
Status tensor_check(const kiln_tensor& t, const char* role, size_t i) {
  const std::string label = std::string(role) + " " + std::to_string(i);
  if (t.name == nullptr) return kiln::invalid_argument(label + ": name is NULL");
  if (t.on_device != 0 && t.on_device != 1)
    return kiln::invalid_argument(label + " ('" + t.name + "'): on_device is " +
                                  std::to_string(t.on_device) + ", expected 0 or 1");
  return Status::ok_status();
}

kiln::Result<kiln::TensorView> input_view(const kiln_tensor& t, size_t i) {
  KILN_RETURN_IF_ERROR(tensor_check(t, "input", i));
  const std::string label = "input '" + std::string(t.name) + "'";
  if (!kiln::dtype_valid(t.dtype))
    return kiln::invalid_argument(label + ": dtype " + std::to_string(t.dtype) +
                                  " is not a kiln_dtype");
  if (t.rank < 0 || t.rank > KILN_MAX_RANK)
    return kiln::invalid_argument(label + ": rank " + std::to_string(t.rank) + " is outside [0, " +
                                  std::to_string(KILN_MAX_RANK) + "]");
  kiln::TensorView v;
  v.name = t.name;
  v.dtype = static_cast<kiln::DType>(t.dtype);
  v.shape.assign(t.shape, t.shape + t.rank);
  v.data = t.data;
  v.memory = t.on_device ? kiln::Memory::kDevice : kiln::Memory::kHost;
  uint64_t need = kiln::dtype_size(v.dtype);
  for (int64_t d : v.shape) {
    if (d < 0 || (d > 0 && need > UINT64_MAX / static_cast<uint64_t>(d)))
      return kiln::invalid_argument(label + ": shape has a negative or overflowing dim");
    need *= static_cast<uint64_t>(d);
  }
  if (need != t.bytes)
    return kiln::invalid_argument(label + ": bytes is " + std::to_string(t.bytes) +
                                  ", its shape and dtype need " + std::to_string(need));
  return v;
}

}  // namespace

extern "C" {

const char* kiln_status_name(kiln_status status) {
  // A C caller may pass any int: read it as one (loading an out-of-range enum is undefined).
  int code = 0;
  static_assert(sizeof code == sizeof status);
  std::memcpy(&code, &status, sizeof code);
  switch (code) {
    case KILN_OK:
      return "OK";
    case KILN_INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case KILN_NOT_FOUND:
      return "NOT_FOUND";
    case KILN_UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case KILN_DATA_LOSS:
      return "DATA_LOSS";
    case KILN_FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case KILN_RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case KILN_INTERNAL:
      return "INTERNAL";
    case KILN_IO_ERROR:
      return "IO_ERROR";
    case KILN_CONTEXT_LOST:
      return "CONTEXT_LOST";
  }
  return "UNKNOWN";
}

size_t kiln_dtype_size(int32_t dtype) {
  return kiln::dtype_valid(dtype) ? kiln::dtype_size(static_cast<kiln::DType>(dtype)) : 0;
}

int kiln_device_available(void) {
  int available = 0;
  (void)guarded("kiln_device_available", [&]() -> Status {
    std::string why;
    available = kiln::cuda_device_available(&why) ? 1 : 0;
    return available ? Status::ok_status() : kiln::failed_precondition("no CUDA device: " + why);
  });
  return available;
}

kiln_status kiln_model_load(const char* dir, kiln_model** out) {
  return guarded("kiln_model_load", [&]() -> Status {
    if (out == nullptr) return null_arg("kiln_model_load", "out");
    *out = nullptr;
    if (dir == nullptr) return null_arg("kiln_model_load", "dir");
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<kiln::Model> model, kiln::Model::load(dir));
    *out = new kiln_model{std::move(model)};
    return Status::ok_status();
  });
}

kiln_status kiln_model_load_trusted(const char* dir, const char* const* trusted_keys, size_t count,
                                    kiln_model** out) {
  return guarded("kiln_model_load_trusted", [&]() -> Status {
    if (out == nullptr) return null_arg("kiln_model_load_trusted", "out");
    *out = nullptr;
    if (dir == nullptr) return null_arg("kiln_model_load_trusted", "dir");
    if (trusted_keys == nullptr || count == 0)
      return kiln::invalid_argument(
          "kiln_model_load_trusted: no trusted keys (use kiln_model_load)");
    kiln::LoadOptions options;
    for (size_t i = 0; i < count; ++i) {
      if (trusted_keys[i] == nullptr)
        return kiln::invalid_argument("kiln_model_load_trusted: trusted_keys[" + std::to_string(i) +
                                      "] is NULL");
      options.trusted_keys.emplace_back(trusted_keys[i]);
    }
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<kiln::Model> model,
                          kiln::Model::load(dir, std::move(options)));
    *out = new kiln_model{std::move(model)};
    return Status::ok_status();
  });
}

void kiln_model_free(kiln_model* model) { delete model; }

kiln_status kiln_model_input_count(const kiln_model* model, size_t* out) {
  return guarded("kiln_model_input_count", [&]() -> Status {
    if (model == nullptr) return null_arg("kiln_model_input_count", "model");
    if (out == nullptr) return null_arg("kiln_model_input_count", "out");
    *out = model->model->inputs().size();
    return Status::ok_status();
  });
}

kiln_status kiln_model_output_count(const kiln_model* model, size_t* out) {
  return guarded("kiln_model_output_count", [&]() -> Status {
    if (model == nullptr) return null_arg("kiln_model_output_count", "model");
    if (out == nullptr) return null_arg("kiln_model_output_count", "out");
    *out = model->model->outputs().size();
    return Status::ok_status();
  });
}

kiln_status kiln_model_max_size(const kiln_model* model, int64_t* out) {
  return guarded("kiln_model_max_size", [&]() -> Status {
    if (model == nullptr) return null_arg("kiln_model_max_size", "model");
    if (out == nullptr) return null_arg("kiln_model_max_size", "out");
    *out = model->model->max_size();
    return Status::ok_status();
  });
}

kiln_status kiln_model_input_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  return guarded("kiln_model_input_info", [&]() -> Status {
    if (model == nullptr) return null_arg("kiln_model_input_info", "model");
    if (out == nullptr) return null_arg("kiln_model_input_info", "out");
    const auto& inputs = model->model->inputs();
    if (index >= inputs.size())
      return kiln::invalid_argument("kiln_model_input_info: index " + std::to_string(index) +
                                    " but the model has " + std::to_string(inputs.size()) +
                                    " inputs");
    return info_fill(inputs[index], out);
  });
}

kiln_status kiln_model_output_info(const kiln_model* model, size_t index, kiln_tensor_info* out) {
  return guarded("kiln_model_output_info", [&]() -> Status {
    if (model == nullptr) return null_arg("kiln_model_output_info", "model");
    if (out == nullptr) return null_arg("kiln_model_output_info", "out");
    const auto& outputs = model->model->outputs();
    if (index >= outputs.size())
      return kiln::invalid_argument("kiln_model_output_info: index " + std::to_string(index) +
                                    " but the model has " + std::to_string(outputs.size()) +
                                    " outputs");
    return info_fill(outputs[index], out);
  });
}

kiln_status kiln_executor_create(const kiln_model* model, int mode, kiln_executor** out) {
  return guarded("kiln_executor_create", [&]() -> Status {
    if (out == nullptr) return null_arg("kiln_executor_create", "out");
    *out = nullptr;
    kiln::ExecutorOptions options;
    KILN_ASSIGN_OR_RETURN(options.mode, kiln::capi::graph_mode_arg("kiln_executor_create", mode));
    if (model == nullptr) return null_arg("kiln_executor_create", "model");
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<kiln::Executor> ex,
                          kiln::Executor::create(model->model, options));
    *out = new kiln_executor{model->model, std::move(ex), {}};
    return Status::ok_status();
  });
}

void kiln_executor_free(kiln_executor* executor) {
  if (executor == nullptr) return;
  executor->gate.close();  // wait for kiln_executor_run calls on other threads
  delete executor;
}

kiln_status kiln_executor_mode(const kiln_executor* executor, int32_t* out) {
  return guarded("kiln_executor_mode", [&]() -> Status {
    if (executor == nullptr) return null_arg("kiln_executor_mode", "executor");
    if (out == nullptr) return null_arg("kiln_executor_mode", "out");
    *out = static_cast<int32_t>(executor->executor->mode());
    return Status::ok_status();
  });
}

kiln_status kiln_executor_downgrade_reason(const kiln_executor* executor, const char** out) {
  return guarded("kiln_executor_downgrade_reason", [&]() -> Status {
    if (executor == nullptr) return null_arg("kiln_executor_downgrade_reason", "executor");
    if (out == nullptr) return null_arg("kiln_executor_downgrade_reason", "out");
    *out = executor->executor->capture_report().downgrade_reason.c_str();
    return Status::ok_status();
  });
}

kiln_status kiln_executor_captured_sizes(const kiln_executor* executor, const int64_t** sizes,
                                         size_t* n) {
  return guarded("kiln_executor_captured_sizes", [&]() -> Status {
    if (executor == nullptr) return null_arg("kiln_executor_captured_sizes", "executor");
    if (sizes == nullptr) return null_arg("kiln_executor_captured_sizes", "sizes");
    if (n == nullptr) return null_arg("kiln_executor_captured_sizes", "n");
    const std::vector<int64_t>& captured = executor->executor->captured_sizes();
    *sizes = captured.data();
    *n = captured.size();
    return Status::ok_status();
  });
}

}  // extern "C"

namespace {

// kiln_executor_run (async false) and kiln_executor_run_async; `api` names the call in errors.
kiln_status executor_run(const char* api, kiln_executor* executor, const kiln_tensor* inputs,
                         size_t n_inputs, kiln_tensor* outputs, size_t n_outputs, bool async,
                         void* stream) {
  return guarded(api, [&]() -> Status {
    if (executor == nullptr) return null_arg(api, "executor");
    kiln::runtime::CallPass pass(executor->gate, api, "executor");
    KILN_RETURN_IF_ERROR(pass.status());
    if (inputs == nullptr && n_inputs > 0) return null_arg(api, "inputs");
    if (outputs == nullptr && n_outputs > 0) return null_arg(api, "outputs");
    std::vector<kiln::TensorView> views;
    views.reserve(n_inputs);
    for (size_t i = 0; i < n_inputs; ++i) {
      KILN_ASSIGN_OR_RETURN(kiln::TensorView v, input_view(inputs[i], i));
      views.push_back(std::move(v));
    }
    std::vector<kiln::OutputView> outs;
    std::vector<const kiln::TensorInfo*> specs;  // null for a name the model lacks
    outs.reserve(n_outputs);
    for (size_t i = 0; i < n_outputs; ++i) {
      const kiln_tensor& t = outputs[i];
      KILN_RETURN_IF_ERROR(tensor_check(t, "output", i));
      specs.push_back(nullptr);
      for (const kiln::TensorInfo& info : executor->model->outputs())
        if (info.name == t.name) specs.back() = &info;
      if (specs.back() != nullptr && specs.back()->dims.size() > KILN_MAX_RANK)
        return kiln::unimplemented("output '" + std::string(t.name) + "' has " +
                                   std::to_string(specs.back()->dims.size()) +
                                   " dims; the C API carries at most KILN_MAX_RANK (" +
                                   std::to_string(KILN_MAX_RANK) + ")");
      outs.push_back(kiln::OutputView{
          t.name, t.data, t.bytes, t.on_device ? kiln::Memory::kDevice : kiln::Memory::kHost, {}});
    }
    KILN_RETURN_IF_ERROR(async ? executor->executor->run_async(views, outs, stream)
                               : executor->executor->run(views, outs));
    for (size_t i = 0; i < n_outputs; ++i) {
      const auto& shape = outs[i].shape;
      outputs[i].dtype = static_cast<int32_t>(specs[i]->dtype);  // run() accepted the name
      outputs[i].rank = static_cast<int32_t>(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) outputs[i].shape[d] = shape[d];
    }
    return Status::ok_status();
  });
}

}  // namespace

extern "C" {

kiln_status kiln_executor_run(kiln_executor* executor, const kiln_tensor* inputs, size_t n_inputs,
                              kiln_tensor* outputs, size_t n_outputs) {
  return executor_run("kiln_executor_run", executor, inputs, n_inputs, outputs, n_outputs, false,
                      nullptr);
}

kiln_status kiln_executor_run_async(kiln_executor* executor, const kiln_tensor* inputs,
                                    size_t n_inputs, kiln_tensor* outputs, size_t n_outputs,
                                    void* stream) {
  return executor_run("kiln_executor_run_async", executor, inputs, n_inputs, outputs, n_outputs,
                      true, stream);
}

}  // extern "C"
