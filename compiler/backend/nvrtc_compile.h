// NVRTC driver: one module source → one cubin per target arch. Needs no GPU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "cache/status.h"

namespace kiln::compiler {

struct NvrtcModule {
  std::string name;    // "module0", used in messages and the saved-source file name
  std::string source;  // full CUDA C++ source
  std::vector<std::pair<std::string, std::string>> headers;  // (include name, text)
};

// Compiles for `arch` ("sm_90", "sm_90a"): returns the cubin bytes. On a failed compile the
// error carries NVRTC's log and the path where the source was saved for inspection.
Result<std::vector<uint8_t>> nvrtc_compile(const NvrtcModule& module, const std::string& arch);

// "13.0"
std::string nvrtc_version();

}  // namespace kiln::compiler
