// kiln: compile ONNX models into a cache directory, and run, verify or inspect what is there.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <utility>

#include "compiler/config.h"
#include "compiler/log.h"
#include "tools/commands.h"

namespace {

constexpr const char* kExitCodes =
    "Exit codes: 0 success, 1 error, 2 usage, 3 no usable CUDA GPU, 4 results disagree\n"
    "(run --reference/--expect, conformance).";

// Every subcommand's --help ends with an example and the exit codes (subcommands inherit the
// top-level footer; one given its own footer where it is defined keeps it).
void add_examples(CLI::App& app) {
  static const std::pair<const char*, const char*> kExamples[] = {
      {"compile",
       "kiln compile model.onnx -c kiln.yaml -o cache/   # no GPU needed\n"
       "  kiln compile model.onnx -c kiln.yaml -o cache-O0/ -O0   # the unfused baseline"},
      {"run",
       "kiln run cache/ -i input_ids=ids.npy --output-dir out/\n"
       "  kiln run cache/ --expect model_dir/test_data_set_0   # vs stored outputs\n"
       "  kiln run cache/ --sizes 1,8 --reference model.onnx"},
      {"bench", "kiln bench cache/ --sizes 1,8,64 --modes FULL,NONE --json"},
      {"generate",
       "kiln generate cache/ --prompt-ids 1,2,3 --max-new-tokens 32\n"
       "  kiln generate cache/ --bench-decode --batches 1,8"},
      {"conformance", "kiln conformance tests/models/exported --precision fp16 -q"},
      {"verify",
       "kiln verify cache/ --json\n"
       "  kiln verify cache/ --trust release.pub   # signed by a trusted key"},
      {"keygen", "kiln keygen -o release   # release.key (secret) and release.pub"},
      {"sign", "kiln sign cache/ --key release.key"},
      {"inspect",
       "kiln inspect model.onnx -c kiln.yaml   # what the front end makes of it\n"
       "  kiln inspect cache/                     # the compiled entries"},
      {"cache", "kiln cache ls cache/ && kiln cache gc cache/ --dry-run"},
      {"device", "kiln device --json"},
      {"help", "kiln help compile"},
  };
  for (const auto& [name, text] : kExamples) {
    CLI::App* sub = app.get_subcommand(name);
    if (sub->get_footer().empty() || sub->get_footer() == app.get_footer())
      sub->footer(fmt::format("Example:\n  {}\n{}", text, kExitCodes));
  }
  for (CLI::App* sub : app.get_subcommand("cache")->get_subcommands({}))
    if (sub->get_footer().empty() || sub->get_footer() == app.get_footer())
      sub->footer(
          fmt::format("Example:\n  kiln cache {} cache/ --json\n{}", sub->get_name(), kExitCodes));
}

// `kiln help [SUBCOMMAND [SUBCOMMAND]]`: that command's --help (the top-level one by default).
int print_help(CLI::App& app, const std::vector<std::string>& topic) {
  CLI::App* at = &app;
  for (const std::string& name : topic) {
    CLI::App* next = nullptr;
    for (CLI::App* sub : at->get_subcommands({}))
      if (sub->get_name() == name) next = sub;
    if (next == nullptr) {
      fmt::print(stderr, "kiln help: no command '{}'; run `kiln --help` for the list\n", name);
      return kiln::tools::kExitUsage;
    }
    at = next;
  }
  fmt::print("{}", at->help());
  return kiln::tools::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::tools;
  CLI::App app{"kiln — ahead-of-time compiler for ONNX models on NVIDIA GPUs"};
  app.require_subcommand(1);
  app.footer(
      "Example:\n"
      "  kiln compile model.onnx -c kiln.yaml -o cache/   # no GPU needed\n"
      "  kiln bench cache/ --sizes 1,8,64                 # on a GPU\n"
      "Each subcommand's --help (or `kiln help COMMAND`) lists its options.\n" +
      std::string(kExitCodes));
  app.set_version_flag("--version", version_text,
                       "print kiln's version and the CUDA, NVRTC and cuBLASLt it uses, then exit");
  app.fallthrough();  // the global flags may also follow the subcommand: kiln compile ... -q
  bool verbose = false, quiet = false;
  auto* verbose_flag =
      app.add_flag("-v,--verbose", verbose, "the compiler's log: debug lines as well as progress");
  app.add_flag("-q,--quiet", quiet, "the compiler's log: warnings and errors only, no progress")
      ->excludes(verbose_flag);

  CompileArgs ca;
  auto* compile =
      app.add_subcommand("compile", "Compile MODEL.onnx into CACHE_DIR (no GPU needed)");
  compile->add_option("model", ca.model, "ONNX model file")->required();
  compile->add_option("-c,--config", ca.config, "kiln.yaml compile configuration")->required();
  compile->add_option("-o,--output", ca.out, "cache directory")->required();
  auto* dump = compile->add_option(
      "--dump-sources", ca.dump_sources_dir,
      "keep the generated CUDA source in the artifact, and write the .cu files to DIR if given");
  dump->expected(0, 1);
  compile->add_option("--tuning-db", ca.tuning_db,
                      "tuning database: decisions are read from FILE and new ones written to it");
  compile
      ->add_option(
          "-O,--level", ca.level,
          "compilation level, overriding compilation.level: 0 one kernel per op (attention "
          "still one), no splitting (a baseline to bisect a wrong answer against); 1 "
          "fusion, whole graph; 2 fusion and splitting; 3 (default) also specialised, "
          "autotuned compile sizes. E.g. `kiln compile m.onnx -c kiln.yaml -o c/ -O0`")
      ->check(CLI::Range(0, kiln::compiler::kMaxCompilationLevel));
  compile->add_flag("--force", ca.force, "recompile even if the artifact is already in the cache");
  compile->add_flag("--json", ca.json,
                    "print the outcome as JSON: artifact, key, cache_hit, seconds, kernels, "
                    "gemms, skinny_gemms, tuned_launches, arena and weights bytes, warnings");
  compile->add_option("--sign", ca.sign_key,
                      "sign the artifact with KEYFILE (kiln keygen's .key): signature.kiln is "
                      "written before the entry is published; a cached entry is a hit only if "
                      "this key signed it");
  compile->add_flag(
      "--explain-key", ca.explain_key,
      "print what the cache key is made of and whether it is cached; compile nothing");

  RunArgs ra;
  auto* run = app.add_subcommand(
      "run", "Run an artifact on the GPU (random, -i or --expect inputs), check and time it");
  run->add_option("cache_dir", ra.cache_dir, "artifact directory or cache root")->required();
  auto* run_inputs = run->add_option(
      "-i,--input", ra.inputs,
      "inputs by name, repeatable: -i input_ids=ids.npy -i mask=m.pb; -i set.npz (every array, "
      "named by its key; np.savez or np.savez_compressed); -i input_0.pb (named by the "
      "TensorProto). .npy: little-endian f4 f2 f8 i8 i4 i1 u1 b1, C order (NumPy has no "
      "bfloat16: give bf16 inputs as .pb). Default: random inputs at --sizes");
  auto* run_expect =
      run->add_option("--expect", ra.expect,
                      "an ONNX backend-test data set (input_0.pb..., output_0.pb...), e.g. "
                      "--expect model_dir/test_data_set_0: run its inputs and compare every "
                      "output with the stored one at the end-to-end tolerance of the artifact's "
                      "precision (exit 4 on a mismatch)")
          ->excludes(run_inputs);
  run->add_option("--output-dir", ra.output_dir,
                  "write every output as DIR/<name>.npy (fp16 as <f2, bf16 as float32) or .pb, "
                  "e.g. --output-dir out/; names outside [A-Za-z0-9._-] become _; with several "
                  "--sizes, DIR/size_S/<name>.npy");
  run->add_option("--output-format", ra.output_format,
                  "npy (default) or pb (ONNX TensorProto, named), e.g. --output-format pb")
      ->check(CLI::IsMember({"npy", "pb"}));
  run->add_flag(
      "--json", ra.json,
      "print one JSON object on stdout, e.g. kiln run cache/ --json | jq .ok: {model, mode, "
      "captured_sizes, sets: [{size, padded, replay, outputs: [{name, dtype, shape, checksum, "
      "expected, reference}], ms}], ok} ({ok: false, error} on a failure)");
  run->add_option("-s,--sizes", ra.sizes,
                  "sizes to run with random inputs, e.g. --sizes 1,8 (default: 1, 3, max_size)")
      ->delimiter(',')
      ->excludes(run_inputs)
      ->excludes(run_expect);
  run->add_option("-r,--reference", ra.reference,
                  "ONNX model: check outputs against the CPU reference, e.g. --reference "
                  "model.onnx (exit 4 on a mismatch)");
  run->add_option("--mode", ra.mode,
                  "cudagraph mode override (NONE, PIECEWISE, FULL, ...), e.g. --mode NONE");
  run->add_option("--iters", ra.iters, "timed repetitions (median reported), e.g. --iters 20")
      ->check(CLI::Range(1, 100000));
  run->add_option("--seed", ra.seed, "random input seed, e.g. --seed 7");

  BenchArgs ba;
  auto* bench = app.add_subcommand("bench", "Time load, capture and runs per size and graph mode");
  bench->add_option("cache_dir", ba.cache_dir, "artifact directory or cache root")->required();
  bench->add_option("--mode", ba.modes, "cudagraph mode(s) (default: the artifact's and NONE)")
      ->delimiter(',');
  bench->add_option("-s,--sizes", ba.sizes, "sizes to run (default: 1,8,64)")->delimiter(',');
  bench->add_option("--weights", ba.weights, "weights upload: auto, direct or pinned");
  bench->add_flag("--compare-upload", ba.compare_upload,
                  "also time loads with each upload strategy");
  bench->add_flag("--json", ba.json, "print everything as JSON");
  bench->add_option("--iters", ba.iters, "timed runs per size and mode")
      ->check(CLI::Range(1, 1000000));
  bench->add_option("--warmup", ba.warmup, "untimed runs first")->check(CLI::Range(0, 1000000));
  bench->add_option("--input-sets", ba.input_sets, "random input sets to rotate")
      ->check(CLI::Range(3, 1000));
  bench->add_option("--seed", ba.seed, "random input seed");

  GenerateArgs ga;
  auto* generate = app.add_subcommand(
      "generate", "Generate tokens with a model compiled for generation, or time its decode steps");
  generate->add_option("cache_dir", ga.cache_dir, "artifact directory or cache root")->required();
  auto* prompt_ids =
      generate->add_option("--prompt-ids", ga.prompt_ids, "one prompt: token ids, e.g. 1,2,3");
  auto* prompts = generate->add_option(
      "--prompts", ga.prompts_file,
      "FILE of prompts, one per line (ids separated by commas or spaces): one ragged batch");
  prompts->excludes(prompt_ids);
  std::vector<CLI::Option*> sampling = {
      generate->add_option("--max-new-tokens", ga.max_new_tokens, "tokens to generate per prompt")
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 30)),
      generate->add_option("--temperature", ga.temperature, "sampling temperature (0: greedy)")
          ->check(CLI::NonNegativeNumber),
      generate->add_option("--top-k", ga.top_k, "sample among the k likeliest tokens (0: off)")
          ->check(CLI::NonNegativeNumber),
      generate->add_option("--top-p", ga.top_p, "nucleus sampling: in (0, 1]; 1: off"),
      generate->add_option("--seed", ga.seed, "sampling seed"),
      generate->add_option("--stop-tokens", ga.stop_tokens, "token ids that end a sequence")};
  generate
      ->add_option("--mode", ga.modes,
                   "cudagraph mode (default: the artifact's); several with --bench-decode")
      ->delimiter(',');
  generate->add_flag("--json", ga.json, "print the results as JSON");
  auto* bench_decode =
      generate->add_flag("--bench-decode", ga.bench_decode,
                         "time decode steps per --mode and batch instead of generating");
  bench_decode->excludes(prompt_ids)->excludes(prompts);
  for (CLI::Option* o : sampling) bench_decode->excludes(o);
  generate->add_option("--batches", ga.batches, "--bench-decode batches (default: 1,8,32,64)")
      ->delimiter(',')
      ->check(CLI::PositiveNumber)
      ->needs(bench_decode);
  generate->add_option("--context", ga.context, "--bench-decode: tokens each sequence holds")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->needs(bench_decode);
  generate->add_option("--iters", ga.iters, "--bench-decode: timed steps (median reported)")
      ->check(CLI::Range(1, 100000))
      ->needs(bench_decode);

  ConformanceArgs fa;
  auto* conformance = app.add_subcommand(
      "conformance",
      "Compile backend-test folders (model.onnx + test_data_set_N), run them on the GPU and "
      "compare with their stored outputs");
  conformance->add_option("dirs", fa.dirs, "backend-test folders, or folders holding them")
      ->required();
  conformance->add_option("--precision", fa.precision,
                          "fp32, tf32, fp16 or bf16 (default: each kiln.yaml's, else fp32)");
  conformance->add_option("--size-dim", fa.size_dim,
                          "the dim_param that is the run-time size (default: kiln.yaml's; "
                          "without one the model compiles static)");
  conformance->add_option("--mode", fa.mode, "cudagraph mode (default: kiln.yaml's, else FULL)");
  conformance->add_option("--exclude", fa.exclude,
                          "file of `name  reason` lines (name may be a glob): not run");
  conformance
      ->add_option("-O,--level", fa.level,
                   "compilation level 0-3 (default: kiln.yaml's, else 3); -O0 checks the "
                   "unfused baseline")
      ->check(CLI::Range(0, kiln::compiler::kMaxCompilationLevel));
  conformance->add_flag("--json", fa.json, "print the results as JSON");
  conformance->add_flag("--autotune", fa.autotune,
                        "autotune while compiling (default off: the heuristics' choices)");
  conformance->add_flag("--compile-only", fa.compile_only,
                        "compile every binding and run nothing (no GPU needed)");

  std::string dir;
  auto* verify = app.add_subcommand(
      "verify", "Check every entry (manifest, file sizes and hashes; with a GPU, loadable here)");
  verify->add_option("dir", dir, "cache directory or one artifact directory")->required();
  bool report_json = false;
  verify->add_flag("--json", report_json,
                   "print JSON: {entries: [{dir, ok, error | format_version, files, bytes}], "
                   "intact, failed, bytes, seconds, device_checked, device_arch}");
  std::vector<std::string> trust;
  verify
      ->add_option("--trust", trust,
                   "a trusted public key (kiln keygen's .pub), repeatable: every entry must "
                   "carry a valid signature by one of them over its current files")
      ->allow_extra_args(false);
  std::string keygen_prefix;
  auto* keygen = app.add_subcommand("keygen", "Make an ed25519 key pair for signing artifacts");
  keygen->add_option("-o,--output", keygen_prefix, "writes PREFIX.key (secret) and PREFIX.pub")
      ->required();
  std::string sign_key;
  auto* sign = app.add_subcommand(
      "sign", "Sign a published artifact in place (verified first; replaces any signature)");
  sign->add_option("dir", dir, "artifact directory or a cache root holding one artifact")
      ->required();
  sign->add_option("--key", sign_key, "secret key file (kiln keygen's .key)")->required();
  bool json = false;
  std::string inspect_config;
  auto* inspect = app.add_subcommand(
      "inspect", "Show a model's ops, attention and piece plan, or the entries of a cache");
  inspect->add_option("path", dir, "MODEL.onnx, a cache directory or one artifact directory")
      ->required();
  inspect->add_option("-c,--config", inspect_config, "kiln.yaml for a model (size_dim, dims)");
  inspect->add_flag("--json", json,
                    "print JSON (model: {ops, unsupported, attention_ops, pieces, "
                    "unique_compute_pieces}; cache: {format_version, entries})");
  auto* cache = app.add_subcommand("cache", "Manage a cache directory");
  cache->require_subcommand(1);
  auto* cache_ls = cache->add_subcommand("ls", "List entries, leftovers and index disagreements");
  cache_ls->add_option("dir", dir, "cache directory")->required();
  bool cache_json = false;
  cache_ls->add_flag(
      "--json", cache_json,
      "print JSON: {cache, entries, leftovers, index_disagreements, other_versions}");
  bool dry_run = false;
  auto* cache_gc = cache->add_subcommand(
      "gc", "Remove corrupt entries and leftovers of dead compiles; never an intact entry");
  cache_gc->add_option("dir", dir, "cache directory")->required();
  cache_gc->add_flag("--dry-run", dry_run, "only say what would be removed");
  cache_gc->add_flag("--json", cache_json, "print JSON: {dry_run, intact, removed, kept}");
  auto* device = app.add_subcommand("device", "Say whether a CUDA GPU is usable here");
  device->add_flag("--json", report_json,
                   "print JSON: {available, reason} or {available, name, arch, sms, memory_bytes}");

  std::vector<std::string> help_topic;
  auto* help = app.add_subcommand("help", "Show the help of kiln or of one command");
  help->add_option("command", help_topic, "a command (and subcommand), e.g. `cache gc`");
  add_examples(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;  // --help is a success
  }
  kiln::compiler::logger().set_level(verbose ? spdlog::level::debug
                                     : quiet ? spdlog::level::warn
                                             : spdlog::level::info);
  if (compile->parsed()) {
    ca.dump_sources = dump->count() > 0;
    return cmd_compile(ca);
  }
  if (run->parsed()) return cmd_run(ra);
  if (bench->parsed()) return cmd_bench(ba);
  if (generate->parsed()) {
    ga.prompt_ids_given = prompt_ids->count() > 0;
    return cmd_generate(ga);
  }
  if (conformance->parsed()) return cmd_conformance(fa);
  if (verify->parsed()) return cmd_verify(dir, report_json, trust);
  if (keygen->parsed()) return cmd_keygen(keygen_prefix);
  if (sign->parsed()) return cmd_sign(dir, sign_key);
  if (inspect->parsed()) {
    if (std::filesystem::is_regular_file(dir)) return cmd_inspect_model(dir, inspect_config, json);
    return cmd_inspect(dir, json);
  }
  if (cache_ls->parsed()) return cmd_cache_ls(dir, cache_json);
  if (cache_gc->parsed()) return cmd_cache_gc(dir, dry_run, cache_json);
  if (device->parsed()) return cmd_device(report_json);
  if (help->parsed()) return print_help(app, help_topic);
  return kExitUsage;
}
