#include "compiler/pipeline.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "cache/artifact_verify.h"
#include "cache/cache_key.h"
#include "cache/cache_layout.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"
#include "compiler/artifact_write.h"
#include "compiler/canonicalize.h"
#include "compiler/kernel_codegen.h"
#include "compiler/lowering.h"
#include "compiler/memory_plan.h"
#include "compiler/nvrtc_compile.h"
#include "compiler/onnx_import.h"

namespace kiln::compiler {
namespace {

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open the model file", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Model bytes plus every constant's bytes (so external data changes the key too).
std::string model_hash(const std::string& model_bytes, const ir::Graph& g) {
  std::string all = model_bytes;
  for (const ir::Value& v : g.values)
    if (v.constant) all.append(reinterpret_cast<const char*>(v.constant->bytes.data()), v.constant->bytes.size());
  return cache::hash128_hex(all);
}

schema::BuildFactors build_factors(const std::string& model_hash_hex, const CompileConfig& config) {
  schema::BuildFactors f;
  f.set_compiler_version(compiler_version());
  f.set_format_version(cache::kFormatVersion);
  int cuda_rt = 0;
  if (cudaRuntimeGetVersion(&cuda_rt) != cudaSuccess) cuda_rt = -1;
  f.set_cuda_runtime_version(cuda_rt);
  f.set_nvrtc_version(nvrtc_version());
  f.set_cublaslt_version(cublasLtGetVersion());
  for (const auto& t : config.targets) f.add_targets(t);
  f.set_model_hash(model_hash_hex);
  f.set_config_hash(cache::hash128_hex(config_normalised(config)));
  return f;
}

Status check_supported(const CompileConfig& config) {
  if (config.precision != Precision::kF32 && config.precision != Precision::kTF32)
    return unimplemented(fmt::format("precision '{}' is not supported yet (supported: fp32, tf32)",
                                     precision_name(config.precision)));
  return Status();
}

}  // namespace

std::string compiler_version() {
  std::string templates;
  for (const auto& [name, text] : kernel_headers()) templates += name + '\0' + text + '\0';
  return fmt::format("{}+{}", KILN_VERSION, cache::hash128_hex(templates).substr(0, 12));
}

Result<ir::Graph> import_canonical(const std::filesystem::path& model, const CompileConfig& config) {
  ImportOptions opts{config.size_dim, config.dims};
  KILN_ASSIGN_OR_RETURN(ir::Graph g, onnx_import_file(model, opts));
  KILN_RETURN_IF_ERROR(canonicalize(g).with_context(model.string()));
  return g;
}

Result<CompileOutcome> compile_model(const CompileRequest& req) {
  KILN_RETURN_IF_ERROR(check_supported(req.config));
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(req.model));
  ImportOptions opts{req.config.size_dim, req.config.dims};
  KILN_ASSIGN_OR_RETURN(ir::Graph g, onnx_import_bytes(bytes, req.model.string(),
                                                       req.model.parent_path(), opts));
  KILN_RETURN_IF_ERROR(canonicalize(g).with_context(req.model.string()));

  CompileOutcome out;
  ArtifactInputs art;
  art.factors = build_factors(model_hash(bytes, g), req.config);
  out.key = cache::cache_key(art.factors);
  out.artifact_dir = cache::artifact_dir(req.cache_root, out.key);
  if (!req.force && cache::artifact_verify(out.artifact_dir).ok()) {
    out.cache_hit = true;
    return out;
  }

  KILN_ASSIGN_OR_RETURN(LoweredProgram prog, lower_graph(g));
  for (const auto& step : prog.steps) out.gemms += std::holds_alternative<GemmLaunch>(step);
  out.kernels = static_cast<int>(prog.kernels.size());
  KILN_ASSIGN_OR_RETURN(MemoryPlan memory, plan_memory(g, prog, req.config.max_size));
  out.arena_bytes = memory.arena_bytes;
  out.weights_bytes = memory.weights.size();

  NvrtcModule module{"module0", codegen_module_source(prog.kernels, req.config.compile_sizes),
                     kernel_headers()};
  for (const std::string& arch : req.config.targets) {
    KILN_ASSIGN_OR_RETURN(art.cubins[arch], nvrtc_compile(module, arch));
  }
  art.graph = &g;
  art.program = &prog;
  art.memory = &memory;
  art.config = &req.config;
  art.source = module.source;
  art.dump_sources = req.dump_sources;
  KILN_ASSIGN_OR_RETURN(out.artifact_dir, artifact_write(art, req.cache_root, out.key));
  return out;
}

}  // namespace kiln::compiler
