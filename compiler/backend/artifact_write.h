// Artifact writing: the lowered, planned program + cubins → a manifest and its files, published
// atomically into the cache (cache/artifact_publish.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "cache/signing_key.h"
#include "cache/status.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/backend/memory_plan.h"
#include "compiler/config.h"
#include "compiler/ir/ir.h"
#include "compiler/passes/kv_paged.h"
#include "schemas/manifest.pb.h"

namespace kiln::compiler {

// A generation program (config `kv_cache:`): the manifest's Generation section.
struct GenerationArtifact {
  GenerationShape shape;
  KvCacheConfig kv;
  int sampling_kernel = -1;  // index into LoweredProgram::kernels (a general kernel)
  uint32_t sampling_block = 0;
  int64_t sampling_grid = 0;  // the most rows one sampling launch takes
};

struct ArtifactInputs {
  const ir::Graph* graph = nullptr;
  const LoweredProgram* program = nullptr;
  const MemoryPlan* memory = nullptr;
  const CompileConfig* config = nullptr;
  schema::BuildFactors factors;
  // codegen_modules' modules, in its order, each with its cubin per target arch; their
  // sources are kept in the artifact with dump_sources.
  struct Module {
    std::string source;
    std::map<std::string, std::vector<uint8_t>> cubins;  // arch → cubin
  };
  std::vector<Module> modules;
  bool dump_sources = false;
  // Tuned cuBLASLt algorithms (autotune/), by flat step index of program->steps.
  std::map<size_t, std::vector<schema::GemmAlgo>> gemm_algos;
  const GenerationArtifact* generation = nullptr;  // null: not a generation program
  const cache::SigningKey* signing_key = nullptr;  // non-null: publish signs the artifact
};

inline constexpr uint64_t kGemmWorkspaceBytes = 32ull << 20;

// Builds the manifest (without files/key, which publishing fills in). Errors name the tensor.
Result<schema::Manifest> manifest_build(const ArtifactInputs& in);

// Publishes under `cache_root` with `key`; returns the artifact directory. The artifact's bytes
// depend only on `in` (no paths, times or hash-map orders), so equal inputs give byte-identical
// artifacts. `index_warning` (optional) receives why the cache index was not updated, if so.
Result<std::filesystem::path> artifact_write(const ArtifactInputs& in,
                                             const std::filesystem::path& cache_root,
                                             const std::string& key,
                                             std::string* index_warning = nullptr);

schema::CompileConfig config_to_schema(const CompileConfig& c);

}  // namespace kiln::compiler
