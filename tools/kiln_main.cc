// kiln: compile ONNX models into a cache directory, and run, verify or inspect what is there.
#include <CLI/CLI.hpp>

#include "tools/commands.h"

int main(int argc, char** argv) {
  using namespace kiln::tools;
  CLI::App app{"kiln — ahead-of-time compiler for ONNX models on NVIDIA GPUs"};
  app.require_subcommand(1);

  CompileArgs ca;
  auto* compile = app.add_subcommand("compile", "Compile MODEL.onnx into CACHE_DIR (no GPU needed)");
  compile->add_option("model", ca.model, "ONNX model file")->required();
  compile->add_option("-c,--config", ca.config, "kiln.yaml compile configuration")->required();
  compile->add_option("-o,--output", ca.out, "cache directory")->required();
  compile->add_flag("--dump-sources", ca.dump_sources, "keep the generated CUDA source in the artifact");
  compile->add_flag("--force", ca.force, "recompile even if the artifact is already in the cache");

  RunArgs ra;
  auto* run = app.add_subcommand("run", "Load an artifact, run it on the GPU and time it");
  run->add_option("cache_dir", ra.cache_dir, "artifact directory or cache root")->required();
  run->add_option("-i,--input", ra.inputs, "input TensorProto file(s); default: random inputs");
  run->add_option("-s,--sizes", ra.sizes, "sizes to run with random inputs")->delimiter(',');
  run->add_option("-r,--reference", ra.reference, "ONNX model: check outputs against the CPU reference");
  run->add_option("--mode", ra.mode, "cudagraph mode override (NONE, PIECEWISE, FULL, ...)");
  run->add_option("--iters", ra.iters, "timed repetitions (median reported)")->check(CLI::Range(1, 100000));
  run->add_option("--seed", ra.seed, "random input seed");

  std::string dir;
  auto* verify = app.add_subcommand("verify", "Check an artifact's manifest and every file hash");
  verify->add_option("dir", dir, "artifact directory or cache root")->required();
  auto* inspect = app.add_subcommand("inspect", "Print an artifact's manifest as JSON");
  inspect->add_option("dir", dir, "artifact directory or cache root")->required();
  auto* device = app.add_subcommand("device", "Say whether a CUDA GPU is usable here");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help is a success
  }
  if (compile->parsed()) return cmd_compile(ca);
  if (run->parsed()) return cmd_run(ra);
  if (verify->parsed()) return cmd_verify(dir);
  if (inspect->parsed()) return cmd_inspect(dir);
  if (device->parsed()) return cmd_device();
  return kExitUsage;
}
