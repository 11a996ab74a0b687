#include "compiler/pipeline.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "cache/artifact_signature.h"
#include "cache/artifact_verify.h"
#include "cache/cache_key.h"
#include "cache/cache_layout.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"
#include "compiler/autotune/autotune.h"
#include "compiler/autotune/kernel_autotune.h"
#include "compiler/autotune/tune_session.h"
#include "compiler/backend/artifact_write.h"
#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/sampling_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/memory_plan.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/log.h"
#include "compiler/passes/precision.h"
#include "compiler/progress.h"

namespace kiln::compiler {
namespace {

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open the model file", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model bytes plus the bytes of every imported constant, so external data changes the key
// too. Taken right after import: canonicalisation is a function of these and the config.
std::string model_hash(const std::string& model_bytes, const ir::Graph& g) {
  std::string all = model_bytes;
  for (const ir::Value& v : g.values)
    if (v.constant)
      all.append(reinterpret_cast<const char*>(v.constant->bytes.data()), v.constant->bytes.size());
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

// Read, import, key: everything before the cache lookup.
struct Prepared {
  CompileConfig config;  // the request's, at its compilation level (config_at_level)
  ir::Graph graph;       // imported, not yet canonicalised
  schema::BuildFactors factors;
  std::string key;
  std::filesystem::path artifact_dir;
};

Result<Prepared> prepare(const CompileRequest& req) {
  KILN_ASSIGN_OR_RETURN(std::string bytes, read_file(req.model));
  Prepared p;
  p.config = config_at_level(req.config);
  ImportOptions opts{p.config.size_dim, p.config.dims};
  opts.max_size = p.config.max_size;
  opts.generation = p.config.kv_cache.has_value();
  KILN_ASSIGN_OR_RETURN(
      p.graph, onnx_import_bytes(bytes, req.model.string(), req.model.parent_path(), opts));
  p.factors = build_factors(model_hash(bytes, p.graph), p.config);
  p.key = cache::cache_key(p.factors);
  p.artifact_dir = cache::artifact_dir(req.cache_root, p.key);
  return p;
}

// OK when `dir` holds a verified artifact published under `key` (signed by `signer`, if given).
Status cached_status(const std::filesystem::path& dir, const std::string& key,
                     const cache::SigningKey* signer) {
  Result<schema::Manifest> m = cache::artifact_verify(dir);
  if (!m.ok()) return m.status();
  if (m->key() != key) {
    return data_loss(
        fmt::format("{}: holds the artifact of key {}, expected {}", dir.string(), m->key(), key));
  }
  if (signer == nullptr) return Status::ok_status();
  const cache::PublicKey mine[] = {signer->public_key};
  return cache::artifact_signature_check(dir, *m, mine).status();
}

AutotuneOptions autotune_options(const CompileConfig& config, const CompileRequest& req) {
  AutotuneOptions opts;
  opts.mode = config.autotune;
  opts.budget_s = static_cast<double>(config.autotune_budget_s);
  opts.tuning_db = req.tuning_db;
  opts.skinny_untimed_max_m = skinny_limits(config, false).untimed;
  return opts;
}

// The share of autotune.budget_s the kernel tuner may spend: it runs first, and the GEMM tuner
// (GEMMs are most of a prefill's time) keeps at least the rest.
constexpr double kKernelBudgetShare = 0.5;

// Chooses launch configurations for the generated kernels at the compile sizes (before codegen:
// the winners are compiled into the module), or forces one for tests. Returns the seconds spent,
// which the GEMM tuner's budget loses.
Result<double> tune_kernels(CompiledModel& cm, const CompileRequest& req) {
  if (req.force_candidate >= 0) {
    force_kernel_candidate(cm.program, cm.config.compile_sizes, req.force_candidate);
    return 0.0;
  }
  KernelAutotuneReport report;
  AutotuneOptions opts = autotune_options(cm.config, req);
  opts.budget_s *= kKernelBudgetShare;
  KILN_RETURN_IF_ERROR(autotune_kernels(opts, cm.graph, cm.config.compile_sizes, cm.config.targets,
                                        cm.program, &report)
                           .with_context("autotune"));
  return report.seconds;
}

// Times GEMM candidates on the manifest as it will be written (final buffers and sizes) and
// records the choices in `art` by step; with no GPU only the tuning database can answer. Sizes
// where cuBLASLt beat a skinny kernel leave the kernel's and the GEMM's gated lists in `program`.
Status autotune(ArtifactInputs& art, LoweredProgram& program, const CompileRequest& req,
                double seconds_spent) {
  AutotuneOptions opts = autotune_options(*art.config, req);
  opts.budget_s = std::max(0.0, opts.budget_s - seconds_spent);
  if (opts.mode == AutotuneMode::kOff) return Status::ok_status();
  KILN_ASSIGN_OR_RETURN(schema::Manifest m, manifest_build(art));
  KILN_RETURN_IF_ERROR(autotune_gemms(opts, m).with_context("autotune"));
  // Manifest steps are the program's steps in order (pieces concatenate them).
  size_t total = 0;
  for (const auto& piece : m.pieces()) total += static_cast<size_t>(piece.steps_size());
  if (total != program.steps.size())
    return internal_error(fmt::format("autotune: the manifest has {} steps, the program {}", total,
                                      program.steps.size()));
  size_t flat = 0;
  for (const auto& piece : m.pieces())
    for (const auto& step : piece.steps()) {
      if (step.has_gemm() && step.gemm().algos_size() > 0)
        art.gemm_algos[flat].assign(step.gemm().algos().begin(), step.gemm().algos().end());
      if (auto* gm = std::get_if<GemmLaunch>(&program.steps[flat]);
          gm != nullptr && step.has_gemm() && flat > 0) {
        gm->skinny_sizes.assign(step.gemm().skinny_sizes().begin(),
                                step.gemm().skinny_sizes().end());
        if (auto* gate = std::get_if<KernelLaunch>(&program.steps[flat - 1]);
            gate != nullptr && gate->run_sizes)
          gate->run_sizes = gm->skinny_sizes;
      }
      ++flat;
    }
  return Status::ok_status();
}

// `--dump-sources DIR`: the module's source as DIR/<module>.cu, for reading and profiling.
Status dump_source(const std::filesystem::path& dir, const NvrtcModule& module) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return io_error(fmt::format("--dump-sources {}: cannot create the directory: {}", dir.string(),
                                ec.message()));
  const auto path = dir / (module.name + ".cu");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << module.source;
  if (!out) return io_error(fmt::format("--dump-sources: cannot write {}", path.string()));
  return Status::ok_status();
}

// NVRTC-compiles `modules` for every target arch into art.modules, in parallel; modules
// compiled before in this process (a kernel another model shares) come from memory.
Status modules_compile(const std::vector<NvrtcModule>& modules,
                       const std::vector<std::string>& targets, ArtifactInputs& art) {
  art.modules.assign(modules.size(), {});
  for (size_t i = 0; i < modules.size(); ++i) art.modules[i].source = modules[i].source;
  Progress progress(fmt::format("NVRTC compile ({} modules)", modules.size()),
                    static_cast<int>(targets.size()));
  for (const std::string& arch : targets) {
    const auto t0 = std::chrono::steady_clock::now();
    NvrtcCounts counts;
    std::vector<Result<std::vector<uint8_t>>> cubins = nvrtc_compile_each(modules, arch, &counts);
    size_t bytes = 0;
    for (size_t i = 0; i < modules.size(); ++i) {
      if (!cubins[i].ok()) return cubins[i].status();
      bytes += cubins[i]->size();
      art.modules[i].cubins[arch] = std::move(*cubins[i]);
    }
    progress.step(fmt::format(
        "{}: {} bytes of cubin in {:.1f} s ({} compiled, {} already compiled in this process)",
        arch, bytes, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
        counts.compiled, counts.remembered));
  }
  return Status::ok_status();
}

// A generation program: its shape for the manifest, and the token-sampling kernel, added to
// the program's kernels (the module compiles it like every other; no step launches it, the
// runtime does after each step).
Status add_generation(CompiledModel& cm) {
  KILN_ASSIGN_OR_RETURN(GenerationShape shape, generation_shape(cm.graph));
  GenerationArtifact a;
  a.shape = shape;
  a.kv = *cm.config.kv_cache;
  SamplingKernel k;
  k.dtype = shape.logits_dtype;
  k.vocab = shape.vocab;
  k.max_rows = std::min(cm.config.max_size, a.kv.max_sequences);
  std::string why;
  if (!sampling_supported(k, &why))
    return unimplemented(fmt::format("output '{}': {}", shape.logits, why));
  SamplingLaunch launch = codegen_sampling(k);
  a.sampling_kernel = static_cast<int>(cm.program.kernels.size());
  a.sampling_block = launch.block;
  a.sampling_grid = launch.grid;
  cm.program.kernels.push_back(std::move(launch.def));
  cm.generation = std::move(a);
  return Status::ok_status();
}

// Canonicalise, lower, plan memory, generate and NVRTC-compile: the artifact, unpublished.
Result<std::unique_ptr<CompiledModel>> build(Prepared p, const CompileRequest& req) {
  auto cm = std::make_unique<CompiledModel>();
  cm->key = std::move(p.key);
  cm->config = std::move(p.config);
  cm->graph = std::move(p.graph);
  std::vector<AttentionNote> notes;
  KILN_RETURN_IF_ERROR(
      front_end_passes_for(cm->graph, cm->config, &notes).with_context(req.model.string()));
  for (const AttentionNote& n : notes)
    logger().warn("kiln: attention at '{}': {}", n.node, n.reason);
  KILN_RETURN_IF_ERROR(precision_lower(cm->graph, cm->config.precision));
  LowerOptions lower_options;
  lower_options.precision = cm->config.precision;
  lower_options.splitting_ops = cm->config.splitting_ops;
  // Any capture size means padded runs: an executor may also override the mode at run time.
  lower_options.padded_runs = !cm->config.capture_sizes.empty();
  lower_options.max_size = cm->config.max_size;
  if (cm->config.kv_cache) lower_options.kv_cache = &*cm->config.kv_cache;
  std::set<int64_t> planned(cm->config.compile_sizes.begin(), cm->config.compile_sizes.end());
  planned.insert(cm->config.capture_sizes.begin(), cm->config.capture_sizes.end());
  lower_options.planned_sizes.assign(planned.begin(), planned.end());
  lower_options.specialised_sizes = cm->config.compile_sizes;
  const SkinnyLimits skinny = skinny_limits(
      cm->config, autotune_times_gemms(autotune_options(cm->config, req), cm->config.targets));
  lower_options.skinny_max_m = skinny.untimed;
  lower_options.skinny_max_m_timed = skinny.timed;
  lower_options.fuse = config_fuses(cm->config);
  KILN_ASSIGN_OR_RETURN(cm->program, lower_graph(cm->graph, lower_options));
  if (cm->config.kv_cache) KILN_RETURN_IF_ERROR(add_generation(*cm));
  KILN_ASSIGN_OR_RETURN(cm->memory, plan_memory(cm->graph, cm->program, cm->config.max_size));
  KILN_ASSIGN_OR_RETURN(const double tuning_seconds, tune_kernels(*cm, req));
  ArtifactInputs& art = cm->inputs;
  art.factors = std::move(p.factors);
  const std::vector<NvrtcModule> modules = codegen_modules(cm->program, cm->config.compile_sizes);
  if (!req.dump_sources_dir.empty())
    for (const NvrtcModule& m : modules) KILN_RETURN_IF_ERROR(dump_source(req.dump_sources_dir, m));
  KILN_RETURN_IF_ERROR(modules_compile(modules, cm->config.targets, art));
  art.graph = &cm->graph;
  art.program = &cm->program;
  art.memory = &cm->memory;
  art.config = &cm->config;
  art.dump_sources = req.dump_sources;
  if (cm->generation) art.generation = &*cm->generation;
  KILN_RETURN_IF_ERROR(autotune(cm->inputs, cm->program, req, tuning_seconds));
  return cm;
}

}  // namespace

Result<KeyExplanation> compile_explain_key(const CompileRequest& req) {
  KILN_ASSIGN_OR_RETURN(Prepared p, prepare(req));
  KeyExplanation e;
  e.factors = std::move(p.factors);
  e.normalised_config = config_normalised(p.config);
  e.key = std::move(p.key);
  e.artifact_dir = std::move(p.artifact_dir);
  e.cached = cached_status(e.artifact_dir, e.key, req.signing_key);
  return e;
}

Result<ir::Graph> import_canonical(const std::filesystem::path& model,
                                   const CompileConfig& requested) {
  const CompileConfig config = config_at_level(requested);
  ImportOptions opts{config.size_dim, config.dims};
  opts.max_size = config.max_size;
  opts.generation = config.kv_cache.has_value();
  KILN_ASSIGN_OR_RETURN(ir::Graph g, onnx_import_file(model, opts));
  KILN_RETURN_IF_ERROR(front_end_passes_for(g, config).with_context(model.string()));
  return g;
}

Result<std::unique_ptr<CompiledModel>> compile_unpublished(const CompileRequest& req) {
  KILN_ASSIGN_OR_RETURN(Prepared p, prepare(req));
  return build(std::move(p), req);
}

Result<CompileOutcome> compile_model(const CompileRequest& req) {
  KILN_ASSIGN_OR_RETURN(Prepared p, prepare(req));
  CompileOutcome out;
  out.key = p.key;
  out.artifact_dir = p.artifact_dir;
  // A hit needs a verified artifact of this very key; a corrupt one is a miss and is replaced.
  if (!req.force && req.force_candidate < 0 &&
      cached_status(out.artifact_dir, out.key, req.signing_key).ok()) {
    out.cache_hit = true;
    return out;
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<CompiledModel> cm, build(std::move(p), req));
  for (const auto& step : cm->program.steps) {
    out.gemms += std::holds_alternative<GemmLaunch>(step);
    if (const auto* g = std::get_if<GemmLaunch>(&step))
      out.skinny_gemms += !g->skinny_sizes.empty();
    out.kernel_steps += std::holds_alternative<KernelLaunch>(step);
    if (const auto* k = std::get_if<KernelLaunch>(&step))
      out.tuned_launches += std::any_of(k->tuned.begin(), k->tuned.end(), [](const auto& t) {
        return t.second.candidate >= 0 && t.second.source != "heuristic";
      });
  }
  out.kernels = static_cast<int>(cm->program.kernels.size());
  out.arena_bytes = cm->memory.arena_bytes;
  out.weights_bytes = cm->memory.weights.size();
  std::string index_warning;
  cm->inputs.signing_key = req.signing_key;
  KILN_ASSIGN_OR_RETURN(out.artifact_dir,
                        artifact_write(cm->inputs, req.cache_root, out.key, &index_warning));
  if (!index_warning.empty()) out.warnings.push_back(std::move(index_warning));
  return out;
}

}  // namespace kiln::compiler
