// The compile pipeline: ONNX + config → import → canonicalise → lower → plan memory → codegen
// → NVRTC (one cubin per target) → publish into the cache. Needs no GPU.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/backend/artifact_write.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/backend/memory_plan.h"
#include "compiler/compiler_version.h"
#include "compiler/config.h"
#include "compiler/ir/ir.h"
#include "schemas/manifest.pb.h"

namespace kiln::compiler {

struct CompileRequest {
  std::filesystem::path model;  // model.onnx
  CompileConfig config;
  std::filesystem::path cache_root;  // artifacts go to <cache_root>/kiln-v<N>/<key>/
  bool dump_sources = false;         // keep the generated CUDA source in the artifact
  bool force = false;  // recompile even when the key is published (an intact one is still kept)
  std::filesystem::path dump_sources_dir = {};  // non-empty: also write the .cu files there
  std::filesystem::path tuning_db = {};         // non-empty: read tuning decisions, write new ones
  // Testing: every kernel launch with more than N candidates uses candidate N at every compile
  // size (TunedChoice source "forced"), instead of timing; -1 (the default) leaves choices to
  // the autotuner. A forced compile is never a cache hit.
  int force_candidate = -1;
  // Non-null: the published artifact is signed with this key (signature.kiln), and a cached
  // artifact is a hit only when this key signed it.
  const cache::SigningKey* signing_key = nullptr;
};

struct CompileOutcome {
  std::filesystem::path artifact_dir;
  std::string key;
  bool cache_hit = false;  // an artifact with this key was already published and verified
  int kernels = 0;         // generated kernels (general ones; each also specialised per size)
  int kernel_steps = 0;    // kernel launches per run (all pieces)
  int gemms = 0;           // GEMM launches per run
  int skinny_gemms = 0;    // GEMMs that run a skinny kernel instead at some size (small M)
  // Kernel launches that use a timed or forced candidate at one compile size or more (not the
  // paged decode's per-batch configurations, which the lowering decides).
  int tuned_launches = 0;
  uint64_t arena_bytes = 0;
  uint64_t weights_bytes = 0;
  std::vector<std::string> warnings;  // e.g. the cache index could not be updated
};

Result<CompileOutcome> compile_model(const CompileRequest& request);

// A compiled model before publishing: what compile_model writes into the cache (it always
// compiles; no cache lookup). For tests that publish one build many times. Not copyable:
// `inputs` points into the other members.
struct CompiledModel {
  CompiledModel() = default;
  CompiledModel(const CompiledModel&) = delete;
  CompiledModel& operator=(const CompiledModel&) = delete;
  std::string key;
  CompileConfig config;
  ir::Graph graph;
  LoweredProgram program;
  MemoryPlan memory;
  std::optional<GenerationArtifact> generation;  // config `kv_cache:`
  ArtifactInputs inputs;  // publish with artifact_write(inputs, cache_root, key)
};
Result<std::unique_ptr<CompiledModel>> compile_unpublished(const CompileRequest& request);

// What the cache key of a compile is made of and whether that key is already published — all
// that compile_model decides before it compiles anything (`kiln compile --explain-key`).
struct KeyExplanation {
  schema::BuildFactors factors;
  std::string normalised_config;  // the text whose hash is factors.config_hash
  std::string key;
  std::filesystem::path artifact_dir;
  Status cached;  // OK: a verified artifact with this key is published (a hit); else why not
};
Result<KeyExplanation> compile_explain_key(const CompileRequest& request);

// The graph as the back end sees it (imported, canonicalised and fused: front_end_passes).
Result<ir::Graph> import_canonical(const std::filesystem::path& model, const CompileConfig& config);

}  // namespace kiln::compiler
