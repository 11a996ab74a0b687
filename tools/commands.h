// The `kiln` CLI's subcommands. Each returns the process exit code and prints its own errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::tools {

struct CompileArgs {
  std::string model, config, out;
  bool dump_sources = false;
  std::string dump_sources_dir;  // --dump-sources DIR
  std::string tuning_db;         // --tuning-db FILE
  bool force = false;
  bool explain_key = false;  // print the key's factors and whether it is cached; compile nothing
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

struct BenchArgs {
  std::string cache_dir;
  std::vector<std::string> modes;  // cudagraph modes to bench; empty: the artifact's and NONE
  std::vector<int64_t> sizes;      // empty: 1, 8, 64 (those <= max_size)
  std::string weights = "auto";    // weights upload strategy: auto, direct, pinned
  bool compare_upload = false;     // also load 3x with each strategy and report the timings
  bool json = false;
  int iters = 200;
  int warmup = 20;
  int input_sets = 3;  // random input sets rotated run by run (at least 3)
  uint32_t seed = 1234;
};
int cmd_bench(const BenchArgs& a);

struct ConformanceArgs {
  std::vector<std::string> dirs;  // backend-test folders, or folders holding them
  std::string precision;          // fp32, tf32, fp16, bf16; empty: each kiln.yaml's
  std::string size_dim;           // the run-time size's dim_param; empty: kiln.yaml's, else static
  std::string mode;               // cudagraph mode; empty: kiln.yaml's
  std::string exclude;            // lines `name  reason`
  bool json = false;
  bool autotune = false;
  bool compile_only = false;  // compile every binding, run nothing (no GPU needed)
};
// Exit: 0 all passed (or excluded), 4 a folder failed, 1 one did not compile, 3 no GPU.
int cmd_conformance(const ConformanceArgs& a);

int cmd_verify(const std::string& dir);
int cmd_inspect(const std::string& dir, bool json);
// MODEL.onnx: the front end's report (ops, unsupported, attention ops, pieces); config optional.
int cmd_inspect_model(const std::string& model, const std::string& config_path, bool json);
int cmd_cache_ls(const std::string& dir);
int cmd_cache_gc(const std::string& dir, bool dry_run);
int cmd_device();

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoGpu = 3;
inline constexpr int kExitMismatch = 4;

}  // namespace kiln::tools
