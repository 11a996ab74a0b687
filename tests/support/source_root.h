// Where tests find checked-in files: the repository root from KILN_SOURCE_ROOT (set by the Meson
// test environment and by tools/run_gpu.sh), or the working directory when it is unset.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace kiln::testing {

inline std::filesystem::path source_root() {
  const char* root = std::getenv("KILN_SOURCE_ROOT");
  return root ? root : ".";
}

// The bundled example model (model.onnx, kiln.yaml, test_data_set_N/).
inline std::filesystem::path example_model_dir() {
  return source_root() / "tests/models/mlp_softmax";
}

}  // namespace kiln::testing
