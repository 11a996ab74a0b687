// NVRTC driver: one module source → one cubin per target arch. Needs no GPU. A process remembers
// what it compiled: the same source, headers, arch and NVRTC give the same cubin bytes, so a
// module compiled before (another model's identical kernel, a second compile of one model) is
// not compiled again.
#pragma once

#include <cstddef>
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
// `remembered` (optional) says whether the cubin came from this process's memory.
Result<std::vector<uint8_t>> nvrtc_compile(const NvrtcModule& module, const std::string& arch,
                                           bool* remembered = nullptr);

// How many of nvrtc_compile_each's modules NVRTC compiled, and how many came from memory.
struct NvrtcCounts {
  int64_t compiled = 0;
  int64_t remembered = 0;
};

// Compiles every module for `arch` on up to `threads` threads (0: one per core, at most 16);
// the results in the modules' order. A failed module does not stop the others.
std::vector<Result<std::vector<uint8_t>>> nvrtc_compile_each(
    const std::vector<NvrtcModule>& modules, const std::string& arch, NvrtcCounts* counts = nullptr,
    size_t threads = 0);

// Forgets every remembered cubin: the next compiles run NVRTC again (a long-running process done
// compiling may release the memory; a test of NVRTC's own determinism compiles twice).
void nvrtc_forget();

// "13.0"
std::string nvrtc_version();

}  // namespace kiln::compiler
