// The `kiln` CLI's subcommands. Each returns the process exit code and prints its own errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::tools {

struct CompileArgs {
  std::string model, config, out;
  bool dump_sources = false;
  bool force = false;
};
int cmd_compile(const CompileArgs& a);

struct RunArgs {
  std::string cache_dir;
  std::vector<std::string> inputs;  // TensorProto files (.pb); empty: random inputs
  std::vector<int64_t> sizes;       // sizes to try with random inputs
  std::string reference;            // model.onnx to check against on the CPU reference
  std::string mode;                 // override the artifact's cudagraph mode
  int iters = 200;
  uint32_t seed = 1234;
};
int cmd_run(const RunArgs& a);

int cmd_verify(const std::string& dir);
int cmd_inspect(const std::string& dir);
int cmd_device();

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoGpu = 3;
inline constexpr int kExitMismatch = 4;

}  // namespace kiln::tools
