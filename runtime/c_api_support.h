// What every file of the C API (runtime/include/kiln/runtime.h) shares: the handle of a loaded
// model, the thread-local last error, and the guard that turns a Status or any exception into a
// kiln_status — c_api.cc (models, executors) and c_api_generator.cc (generators) both use them.
#pragma once

#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "cache/status.h"
#include "kiln/graph_mode.h"
#include "kiln/model.h"
#include "kiln/runtime.h"

struct kiln_model {
  std::shared_ptr<kiln::Model> model;
};

namespace kiln::capi {

// Records `s` as this thread's last error (cleared when ok) and returns its code.
kiln_status finish(const Status& s) noexcept;

// Runs `f` (returning a Status) with every exception turned into a status: the body of every
// C API entry point.
template <typename F>
kiln_status guarded(const char* what, F&& f) noexcept {
  try {
    return finish(f());
  } catch (const std::bad_alloc&) {
    return finish(resource_exhausted(std::string("out of host memory in ") + what));
  } catch (const std::exception& e) {
    return finish(internal_error(std::string(what) + ": " + e.what()));
  } catch (...) {
    return finish(internal_error(std::string(what) + ": unknown exception"));
  }
}

// invalid_argument "FN: ARG is NULL".
Status null_arg(const char* fn, const char* arg);

// A kiln_graph_mode argument: nullopt for KILN_GRAPH_MODE_ARTIFACT, else the mode;
// invalid_argument naming `fn` for a value outside -1..4.
Result<std::optional<CudaGraphMode>> graph_mode_arg(const char* fn, int mode);

}  // namespace kiln::capi
