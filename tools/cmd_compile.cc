// kiln compile [--explain-key].
#include <fmt/format.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>

#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

std::string cuda_version_text(int v) {
  return v <= 0 ? fmt::format("{} (unknown)", v)
                : fmt::format("{} (CUDA {}.{})", v, v / 1000, (v % 1000) / 10);
}

int explain_key(const compiler::CompileRequest& req) {
  auto e = compiler::compile_explain_key(req);
  if (!e.ok()) {
    fmt::print(stderr, "kiln compile --explain-key: {}\n", e.status().to_string());
    return kExitError;
  }
  const auto& f = e->factors;
  fmt::print("cache key factors for {}:\n", req.model.string());
  fmt::print("  compiler_version     : {}\n", f.compiler_version());
  fmt::print("  format_version       : {}\n", f.format_version());
  fmt::print("  cuda_runtime_version : {}\n", cuda_version_text(f.cuda_runtime_version()));
  fmt::print("  nvrtc_version        : {}\n", f.nvrtc_version());
  fmt::print("  cublaslt_version     : {}\n", f.cublaslt_version());
  fmt::print("  targets              : {}\n", fmt::join(f.targets(), ", "));
  fmt::print("  model_hash           : {} (model bytes and external data)\n", f.model_hash());
  fmt::print("  config_hash          : {} (of the normalised config below)\n", f.config_hash());
  std::string indented;
  for (std::size_t start = 0; start < e->normalised_config.size();) {
    const std::size_t nl = e->normalised_config.find('\n', start);
    const std::size_t end = nl == std::string::npos ? e->normalised_config.size() : nl;
    indented += "    " + e->normalised_config.substr(start, end - start) + "\n";
    start = end + 1;
  }
  fmt::print("{}", indented);
  fmt::print("key      : {}\nartifact : {}\n", e->key, e->artifact_dir.string());
  if (e->cached.ok()) {
    fmt::print("cache    : hit (published and verified)\n");
  } else {
    fmt::print("cache    : miss ({})\n", e->cached.message());
  }
  return kExitOk;
}

}  // namespace

int cmd_compile(const CompileArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  auto config = compiler::config_load(a.config);
  if (!config.ok()) {
    fmt::print(stderr, "kiln compile: {}\n", config.status().message());
    return kExitError;
  }
  if (a.level >= 0) config->level = a.level;
  compiler::CompileRequest req{a.model, *config, a.out, a.dump_sources, a.force};
  *config = compiler::config_at_level(*config);  // what was compiled, for the summary
  req.dump_sources_dir = a.dump_sources_dir;
  req.tuning_db = a.tuning_db;
  std::optional<cache::SigningKey> signing_key;
  if (!a.sign_key.empty()) {
    auto key = cache::signing_key_read(a.sign_key);
    if (!key.ok()) {
      fmt::print(stderr, "kiln compile: --sign: {}\n", key.status().message());
      return kExitError;
    }
    signing_key = std::move(key).value();
    req.signing_key = &*signing_key;
  }
  if (a.explain_key) return explain_key(req);
  auto out = compiler::compile_model(req);
  if (!out.ok()) {
    fmt::print(stderr, "kiln compile: {}\n", out.status().to_string());
    return kExitError;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const std::string& w : out->warnings) fmt::print(stderr, "kiln compile: warning: {}\n", w);
  if (a.json) {  // on a cache hit nothing was built: only what the hit knows
    nlohmann::json j = {{"model", a.model},       {"artifact", out->artifact_dir.string()},
                        {"key", out->key},        {"cache_hit", out->cache_hit},
                        {"seconds", secs},        {"max_size", config->max_size},
                        {"level", config->level}, {"warnings", out->warnings}};
    if (signing_key) j["signed_by"] = cache::public_key_hex(signing_key->public_key);
    if (!out->cache_hit) {
      j["kernels"] = out->kernels;
      j["compile_sizes"] = config->compile_sizes;
      j["gemms"] = out->gemms;
      j["skinny_gemms"] = out->skinny_gemms;
      if (config->skinny_gemm_max_m == compiler::kSkinnyGemmMaxMAuto) {
        j["skinny_gemm_max_m"] = "auto";
      } else {
        j["skinny_gemm_max_m"] = config->skinny_gemm_max_m;
      }
      j["tuned_launches"] = out->tuned_launches;
      j["kernel_steps"] = out->kernel_steps;
      j["arena_bytes"] = out->arena_bytes;
      j["weights_bytes"] = out->weights_bytes;
    }
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  if (out->cache_hit) {
    fmt::print("cache hit: {} (key {}) — already compiled and verified{}, {:.3f} s\n",
               out->artifact_dir.string(), out->key, signing_key ? " and signed by this key" : "",
               secs);
    return kExitOk;
  }
  fmt::print("compiled {} in {:.2f} s (level {})\n", a.model, secs, config->level);
  fmt::print("  artifact : {}\n  key      : {}\n", out->artifact_dir.string(), out->key);
  if (signing_key)
    fmt::print("  signed   : by key {}\n", cache::public_key_hex(signing_key->public_key));
  fmt::print("  kernels  : {} generated (+{} specialised each), {} cuBLASLt GEMMs\n", out->kernels,
             config->compile_sizes.size(), out->gemms);
  if (out->skinny_gemms > 0 && config->skinny_gemm_max_m == compiler::kSkinnyGemmMaxMAuto)
    fmt::print(
        "  skinny   : {} of the GEMMs run a generated skinny-GEMM kernel at the sizes where "
        "M <= {}, or M <= {} at a compile size where it timed faster than cuBLASLt "
        "(compilation.skinny_gemm_max_m: auto)\n",
        out->skinny_gemms, compiler::kSkinnyAutoUntimedMaxM, compiler::kSkinnyGemmMaxM);
  else if (out->skinny_gemms > 0)
    fmt::print(
        "  skinny   : {} of the GEMMs run a generated skinny-GEMM kernel at the sizes where "
        "M <= {} (compilation.skinny_gemm_max_m)\n",
        out->skinny_gemms, config->skinny_gemm_max_m);
  if (out->tuned_launches > 0)
    fmt::print("  tuned    : {} of {} kernel launches run a tuned launch configuration at some "
               "compile size (kiln inspect shows which)\n",
               out->tuned_launches, out->kernel_steps);
  fmt::print("  memory   : arena {} bytes at max_size {}, weights {} bytes\n", out->arena_bytes,
             config->max_size, out->weights_bytes);
  return kExitOk;
}

}  // namespace kiln::tools
