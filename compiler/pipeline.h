// The compile pipeline: ONNX + config → import → canonicalise → lower → plan memory → codegen
// → NVRTC (one cubin per target) → publish into the cache. Needs no GPU.
#pragma once

#include <filesystem>
#include <string>

#include "cache/status.h"
#include "compiler/config.h"
#include "compiler/ir.h"
#include "schemas/manifest.pb.h"

namespace kiln::compiler {

struct CompileRequest {
  std::filesystem::path model;       // model.onnx
  CompileConfig config;
  std::filesystem::path cache_root;  // artifacts go to <cache_root>/kiln-v<N>/<key>/
  bool dump_sources = false;         // keep the generated CUDA source in the artifact
  bool force = false;                // recompile even when the key is already published
};

struct CompileOutcome {
  std::filesystem::path artifact_dir;
  std::string key;
  bool cache_hit = false;  // an artifact with this key was already published and verified
  int kernels = 0;         // generated kernels (general ones; each also specialised per size)
  int gemms = 0;
  uint64_t arena_bytes = 0;
  uint64_t weights_bytes = 0;
};

Result<CompileOutcome> compile_model(const CompileRequest& request);

// The graph as the back end sees it (imported and canonicalised) — for `--dump-ir` and tests.
Result<ir::Graph> import_canonical(const std::filesystem::path& model, const CompileConfig& config);

// The compiler's identity for cache keys: version plus a hash of the kernel templates.
std::string compiler_version();

}  // namespace kiln::compiler
