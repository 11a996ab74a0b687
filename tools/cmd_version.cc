// kiln --version: what this kiln is and what it compiles with.
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cache/manifest_io.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/pipeline.h"
#include "tools/commands.h"
#include "tools/git_revision.h"

namespace kiln::tools {

std::string version_text() {
  int rt = 0;
  const std::string runtime = cudaRuntimeGetVersion(&rt) == cudaSuccess
                                  ? fmt::format("{}.{}", rt / 1000, rt % 1000 / 10)
                                  : std::string("unknown");
  const size_t lt = cublasLtGetVersion();
  return fmt::format(
      "kiln {}\n"
      "compiler {} (the version, then a hash of the compiler's sources; part of every cache key)\n"
      "artifact format {}\n"
      "CUDA runtime {}, NVRTC {}, cuBLASLt {}.{}.{}\n"
      "built from git revision {}",
      KILN_VERSION, compiler::compiler_version(), cache::kFormatVersion, runtime,
      compiler::nvrtc_version(), lt / 10000, lt % 10000 / 100, lt % 100, KILN_GIT_REVISION);
}

}  // namespace kiln::tools
