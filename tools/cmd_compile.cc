#include <fmt/format.h>

#include <chrono>

#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "tools/commands.h"

namespace kiln::tools {

int cmd_compile(const CompileArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  auto config = compiler::config_load(a.config);
  if (!config.ok()) {
    fmt::print(stderr, "kiln compile: {}\n", config.status().message());
    return kExitError;
  }
  compiler::CompileRequest req{a.model, *config, a.out, a.dump_sources, a.force};
  auto out = compiler::compile_model(req);
  if (!out.ok()) {
    fmt::print(stderr, "kiln compile: {}\n", out.status().to_string());
    return kExitError;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (out->cache_hit) {
    fmt::print("cache hit: {} (key {}) — already compiled and verified\n",
               out->artifact_dir.string(), out->key);
    return kExitOk;
  }
  fmt::print("compiled {} in {:.2f} s\n", a.model, secs);
  fmt::print("  artifact : {}\n  key      : {}\n", out->artifact_dir.string(), out->key);
  fmt::print("  kernels  : {} generated (+{} specialised each), {} cuBLASLt GEMMs\n", out->kernels,
             config->compile_sizes.size(), out->gemms);
  fmt::print("  memory   : arena {} bytes at max_size {}, weights {} bytes\n", out->arena_bytes,
             config->max_size, out->weights_bytes);
  return kExitOk;
}

}  // namespace kiln::tools
