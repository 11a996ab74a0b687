// The `kiln` CLI's subcommands. Each returns the process exit code and prints its own errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/signing_key.h"
#include "cache/status.h"

namespace kiln::tools {

struct CompileArgs {
  std::string model, config, out;
  bool dump_sources = false;
  std::string dump_sources_dir;  // --dump-sources DIR
  std::string tuning_db;         // --tuning-db FILE
  bool force = false;
  bool explain_key = false;  // print the key's factors and whether it is cached; compile nothing
  bool json = false;         // print the outcome as JSON instead of the summary
  int level = -1;            // -O N: compilation.level override; -1: the config's
  std::string sign_key;      // --sign KEYFILE: sign the published artifact (kiln keygen's .key)
};
// `kiln --version`: kiln, compiler and artifact-format versions, CUDA runtime, NVRTC, cuBLASLt.
std::string version_text();

int cmd_compile(const CompileArgs& a);

struct RunArgs {
  std::string cache_dir;
  std::vector<std::string> inputs;  // NAME=FILE.npy|.pb, FILE.npz, FILE.pb; empty: random inputs
  std::string expect;      // an ONNX backend-test data set: its inputs, its outputs checked
  std::string output_dir;  // write every output here
  std::string output_format = "npy";  // npy or pb
  bool json = false;
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

struct GenerateArgs {
  std::string cache_dir;
  std::string prompt_ids;         // --prompt-ids "1,2,3": one prompt
  bool prompt_ids_given = false;  // (an empty --prompt-ids is an error, not "no prompt")
  std::string prompts_file;       // --prompts FILE: one prompt per line, one ragged batch
  int64_t max_new_tokens = 16;
  float temperature = 0.0f;  // SamplingParams: 0 greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
  std::string stop_tokens;         // --stop-tokens "a,b"
  std::vector<std::string> modes;  // one to generate with; several with --bench-decode
  bool json = false;
  bool bench_decode = false;     // time decode steps instead of generating
  std::vector<int64_t> batches;  // --bench-decode; empty: 1, 8, 32, 64
  int64_t context = 512;         // --bench-decode: tokens each sequence holds
  int iters = 50;                // --bench-decode: timed steps (median reported)
};
// Exit: 0 done, 1 an error (the artifact, or generation failed), 2 usage (arguments, or prompts
// that do not fit the artifact), 3 no GPU.
int cmd_generate(const GenerateArgs& a);

struct ConformanceArgs {
  std::vector<std::string> dirs;  // backend-test folders, or folders holding them
  std::string precision;          // fp32, tf32, fp16, bf16; empty: each kiln.yaml's
  std::string size_dim;           // the run-time size's dim_param; empty: kiln.yaml's, else static
  std::string mode;               // cudagraph mode; empty: kiln.yaml's
  std::string exclude;            // lines `name  reason`
  bool json = false;
  bool autotune = false;
  bool compile_only = false;  // compile every binding, run nothing (no GPU needed)
  int level = -1;             // -O N: compilation.level; -1: kiln.yaml's
};
// Exit: 0 all passed (or excluded), 4 a folder failed, 1 one did not compile, 3 no GPU.
int cmd_conformance(const ConformanceArgs& a);

// `trust`: .pub files; when given, every entry must carry a valid signature by one of them.
int cmd_verify(const std::string& dir, bool json, const std::vector<std::string>& trust = {});
// kiln keygen -o PREFIX: PREFIX.key (secret, 0600) and PREFIX.pub. kiln sign DIR --key KEYFILE.
int cmd_keygen(const std::string& prefix);
int cmd_sign(const std::string& dir, const std::string& key_file);
int cmd_inspect(const std::string& dir, bool json);
// MODEL.onnx: the front end's report (ops, unsupported, attention ops, pieces); config optional.
int cmd_inspect_model(const std::string& model, const std::string& config_path, bool json);
int cmd_cache_ls(const std::string& dir, bool json);
int cmd_cache_gc(const std::string& dir, bool dry_run, bool json);
int cmd_device(bool json);

// The public keys of `kiln keygen` .pub files; the error names the file.
Result<std::vector<cache::PublicKey>> trusted_keys_read(const std::vector<std::string>& files);

// Exit codes.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNoGpu = 3;
inline constexpr int kExitMismatch = 4;

}  // namespace kiln::tools
