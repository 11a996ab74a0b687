// The C API's shared support (c_api_support.h): the thread-local last error and argument checks.
#include "runtime/c_api_support.h"

namespace kiln::capi {
namespace {

thread_local std::string t_last_error;

}  // namespace

kiln_status finish(const Status& s) noexcept {
  try {
    if (s.ok()) {
      t_last_error.clear();
    } else {
      t_last_error = s.to_string();
    }
  } catch (...) {
    // Out of memory for the message itself: keep the code, the message stays as it was.
  }
  return static_cast<kiln_status>(s.code());
}

Status null_arg(const char* fn, const char* arg) {
  return invalid_argument(std::string(fn) + ": " + arg + " is NULL");
}

Result<std::optional<CudaGraphMode>> graph_mode_arg(const char* fn, int mode) {
  if (mode == KILN_GRAPH_MODE_ARTIFACT) return std::optional<CudaGraphMode>();
  const auto m = static_cast<CudaGraphMode>(mode);
  if (!cuda_graph_mode_valid(m))
    return invalid_argument(std::string(fn) + ": mode " + std::to_string(mode) +
                            " is not a kiln_graph_mode (-1 to 4)");
  return std::optional<CudaGraphMode>(m);
}

}  // namespace kiln::capi

extern "C" const char* kiln_last_error(void) { return kiln::capi::t_last_error.c_str(); }
