#include "compiler/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

using kiln::testing::source_root;

CompileConfig parse_ok(const std::string& yaml) {
  Result<CompileConfig> r = config_parse(yaml, "kiln.yaml");
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : CompileConfig{};
}

// Expects an invalid-argument error whose message contains `needle` (and returns the message).
std::string parse_error(const std::string& yaml, const std::string& needle) {
  Result<CompileConfig> r = config_parse(yaml, "kiln.yaml");
  EXPECT_FALSE(r.ok()) << "expected an error containing: " << needle;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  return r.status().message();
}

const std::string kBase = "size_dim: batch\nmax_size: 64\n";

TEST(Config, LoadsTheTestModelConfig) {
  Result<CompileConfig> r = config_load(source_root() / "tests/models/mlp_softmax/kiln.yaml");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->size_dim, "batch");
  EXPECT_EQ(r->max_size, 64);
  EXPECT_EQ(r->precision, Precision::kF32);
  EXPECT_EQ(r->targets, std::vector<std::string>{"sm_90"});
  EXPECT_EQ(r->mode, CudaGraphMode::kFull);
  EXPECT_EQ(r->compile_sizes, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(r->capture_sizes, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_TRUE(r->dims.empty());
}

TEST(Config, Defaults) {
  CompileConfig c = parse_ok("size_dim: n\nmax_size: 100\n");
  EXPECT_EQ(c.size_dim, "n");
  EXPECT_EQ(c.precision, Precision::kF32);
  EXPECT_EQ(c.targets, std::vector<std::string>{"sm_90"});
  EXPECT_EQ(c.mode, CudaGraphMode::kFull);
  EXPECT_TRUE(c.compile_sizes.empty());
  EXPECT_EQ(c.capture_sizes, (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 100}));
  EXPECT_EQ(parse_ok("size_dim: n\nmax_size: 1\n").capture_sizes, std::vector<int64_t>{1});
  EXPECT_EQ(parse_ok("size_dim: n\nmax_size: 8\n").capture_sizes,
            (std::vector<int64_t>{1, 2, 4, 8}));
}

TEST(Config, EveryField) {
  CompileConfig c = parse_ok(
      "size_dim: tokens\n"
      "dims: {seq: 128, heads: 8}\n"
      "max_size: 4096\n"
      "precision: bf16\n"
      "targets: [sm_120, sm_80, sm_90a]\n"
      "compilation:\n"
      "  mode: FULL_AND_PIECEWISE\n"
      "  compile_sizes: [1, 16, 4096]\n"
      "  cudagraph_capture_sizes: [1, 2, 3, 512]\n");
  EXPECT_EQ(c.dims, (std::map<std::string, int64_t>{{"seq", 128}, {"heads", 8}}));
  EXPECT_EQ(c.precision, Precision::kBF16);
  // Targets come out in one canonical order whatever order the file lists them in.
  EXPECT_EQ(c.targets, (std::vector<std::string>{"sm_80", "sm_90a", "sm_120"}));
  EXPECT_EQ(c.mode, CudaGraphMode::kFullAndPiecewise);
  EXPECT_EQ(c.compile_sizes, (std::vector<int64_t>{1, 16, 4096}));
  EXPECT_EQ(c.capture_sizes, (std::vector<int64_t>{1, 2, 3, 512}));
}

TEST(Config, EnumNames) {
  EXPECT_STREQ(cuda_graph_mode_name(CudaGraphMode::kFullDecodeOnly), "FULL_DECODE_ONLY");
  EXPECT_STREQ(cuda_graph_mode_name(CudaGraphMode::kNone), "NONE");
  EXPECT_EQ(precision_name(Precision::kTF32), "tf32");
  for (const char* p : {"fp32", "tf32", "fp16", "bf16"})
    EXPECT_EQ(precision_name(parse_ok(kBase + "precision: " + p + "\n").precision), p);
  for (const char* m : {"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})
    EXPECT_STREQ(cuda_graph_mode_name(parse_ok(kBase + "compilation: {mode: " + m + "}\n").mode),
                 m);
}

TEST(ConfigErrors, UnknownModeMessageIsExact) {
  EXPECT_EQ(parse_error(kBase + "precision: fp32\ncompilation:\n  mode: FASTEST\n", "FASTEST"),
            "kiln.yaml:5:3: compilation.mode: 'FASTEST' is not one of NONE, PIECEWISE, FULL, "
            "FULL_DECODE_ONLY, FULL_AND_PIECEWISE");
}

TEST(ConfigErrors, SyntaxErrorHasOneBasedLineAndColumn) {
  // yaml-cpp reports the unterminated flow sequence at 0-based 2:1.
  parse_error(kBase + "targets: [sm_90\nprecision: fp32\n", "kiln.yaml:4:");
  parse_error("size_dim: a\n  max_size: 2\n", "kiln.yaml:2:");
  std::string msg = parse_error("size_dim: a\nmax_size: [1, 2\n", "YAML syntax error");
  EXPECT_EQ(msg.rfind("kiln.yaml:", 0), 0u) << msg;
}

TEST(ConfigErrors, UnknownKeys) {
  parse_error(kBase + "max_batch: 3\n",
              "kiln.yaml:3:1: unknown key 'max_batch' (allowed: size_dim, dims, max_size, "
              "precision, targets, compilation, autotune, kv_cache)");
  parse_error(kBase + "compilation:\n  mode: FULL\n  split_ops: []\n",
              "kiln.yaml:5:3: unknown key 'compilation.split_ops' (allowed: mode, "
              "compile_sizes, cudagraph_capture_sizes, splitting_ops, skinny_gemm_max_m, level)");
  parse_error(kBase + "compilation:\n  splitting_ops: [attention, Conv]\n",
              "compilation.splitting_ops[1]: 'Conv' is not one of");
  parse_error(kBase + "compilation:\n  splitting_ops: [attention, attention]\n",
              "'attention' is listed twice");
  parse_error(kBase + "max_size: 32\n", "kiln.yaml:3:1: max_size: duplicate key");
}

TEST(ConfigErrors, WrongTypes) {
  parse_error("size_dim: n\nmax_size: lots\n",
              "kiln.yaml:2:1: max_size: expected an integer, got 'lots'");
  parse_error("size_dim: n\nmax_size: 1.5\n", "max_size: expected an integer");
  parse_error("size_dim: n\nmax_size: [64]\n", "max_size: expected an integer, got a list");
  parse_error("size_dim: n\nmax_size: '64'\n", "expected an integer, got the quoted string '64'");
  parse_error("size_dim: n\nmax_size:\n", "max_size: expected an integer, got an empty value");
  parse_error("size_dim: [a]\nmax_size: 4\n", "size_dim: expected a string, got a list");
  parse_error(kBase + "targets: sm_90\n", "targets: expected a list of architectures, got 'sm_90'");
  parse_error(kBase + "dims: [1]\n", "dims: expected a map, got a list");
  parse_error(kBase + "dims: {seq: big}\n", "dims.seq: expected an integer, got 'big'");
  parse_error(kBase + "compilation: FULL\n", "compilation: expected a map, got 'FULL'");
  parse_error(kBase + "compilation:\n  compile_sizes: 8\n",
              "compilation.compile_sizes: expected a list of integers, got '8'");
  parse_error(kBase + "compilation:\n  cudagraph_capture_sizes: [1, x]\n",
              "compilation.cudagraph_capture_sizes[1]: expected an integer, got 'x'");
  parse_error("- 1\n- 2\n", "kiln.yaml:1:1: the config must be a map");
  parse_error("size_dim: n\nmax_size: 99999999999999999999\n",
              "max_size: '99999999999999999999' is out of range");
}

TEST(ConfigErrors, RequiredAndEmpty) {
  parse_error("", "kiln.yaml: the config is empty; required keys: size_dim, max_size");
  parse_error("# nothing\n", "the config is empty");
  parse_error("max_size: 4\n", "missing required key 'size_dim'");
  parse_error("size_dim: n\n", "missing required key 'max_size'");
  parse_error("size_dim: ''\nmax_size: 4\n", "size_dim: must not be empty");
  parse_error(kBase + "---\nsize_dim: m\n", "expected one YAML document");
}

TEST(ConfigErrors, OutOfRangeSizes) {
  parse_error("size_dim: n\nmax_size: 0\n", "max_size: 0 is outside [1, 1048576]");
  parse_error("size_dim: n\nmax_size: 1048577\n", "max_size: 1048577 is outside [1, 1048576]");
  parse_error("size_dim: n\nmax_size: -4\n", "max_size: -4 is outside");
  parse_error(
      kBase + "compilation:\n  compile_sizes: [1, 65]\n",
      "kiln.yaml:4:22: compilation.compile_sizes[1]: size 65 is outside [1, max_size = 64]");
  parse_error(kBase + "compilation:\n  compile_sizes: [0]\n", "size 0 is outside");
  parse_error(kBase + "compilation:\n  cudagraph_capture_sizes: [1, 2, 128]\n",
              "compilation.cudagraph_capture_sizes[2]: size 128 is outside [1, max_size = 64]");
  parse_error(kBase + "dims: {seq: 0}\n", "dims.seq: 0 is outside [1, 2147483647]");
}

TEST(ConfigErrors, UnsortedOrDuplicateSizes) {
  parse_error(kBase + "compilation:\n  compile_sizes: [8, 1]\n",
              "compilation.compile_sizes[1]: 1 is smaller than the previous entry 8");
  parse_error(kBase + "compilation:\n  cudagraph_capture_sizes: [1, 4, 4]\n",
              "compilation.cudagraph_capture_sizes[2]: 4 duplicates the previous entry 4");
}

TEST(ConfigErrors, UnknownArchModePrecision) {
  parse_error(
      kBase + "targets: [sm_90, sm_91]\n",
      "kiln.yaml:3:18: targets[1]: 'sm_91' is not one of sm_75, sm_80, sm_86, sm_87, sm_89, "
      "sm_90, sm_90a, sm_100, sm_120");
  parse_error(kBase + "targets: [sm_90, sm_90]\n", "targets[1]: 'sm_90' is listed twice");
  parse_error(kBase + "targets: []\n", "targets: must list at least one architecture");
  parse_error(kBase + "precision: fp8\n",
              "kiln.yaml:3:1: precision: 'fp8' is not one of fp32, tf32, fp16, bf16");
  parse_error(kBase + "compilation: {mode: full}\n", "'full' is not one of NONE");
}

TEST(ConfigErrors, DimsAndCaptureRules) {
  parse_error(kBase + "dims: {batch: 4}\n", "dims.batch: 'batch' is the size_dim");
  parse_error(kBase + "compilation:\n  cudagraph_capture_sizes: []\n",
              "must not be empty when mode is FULL");
  CompileConfig c = parse_ok(kBase + "compilation:\n  mode: NONE\n  cudagraph_capture_sizes: []\n");
  EXPECT_TRUE(c.capture_sizes.empty());
}

TEST(ConfigErrors, DimNamesAreShortAndPrintable) {
  // A dim name is an ONNX dim_param: no control characters, at most 256 bytes. The normalised
  // config writes each as a YAML key, which YAML caps at 1024 characters (a fuzzer's 274-byte
  // name of control characters, escaped four characters each, made the cache key unparsable).
  parse_error(kBase + "dims: {\"a\\x07b\": 2}\n",
              "dims: a dim name has the control character 0x07 at byte 1");
  parse_error("size_dim: \"s\\tq\"\nmax_size: 4\n",
              "size_dim: a dim name has the control character 0x09 at byte 1");
  parse_error(kBase + "dims: {" + std::string(257, 'd') + ": 2}\n",
              "a dim name of 257 bytes is longer than 256");
  const CompileConfig c = parse_ok(kBase + "dims: {" + std::string(256, 'd') + ": 2}\n");
  EXPECT_EQ(parse_ok(config_normalised(c)).dims, c.dims);
  // Quotes, backslashes and bytes that are not UTF-8 round-trip through the normalised text.
  const CompileConfig odd = parse_ok(kBase + "dims: {\"q\\\"b\\\\\xfb\xff\": 3}\n");
  ASSERT_EQ(odd.dims.size(), 1u);
  EXPECT_EQ(odd.dims.begin()->first, "q\"b\\\xfb\xff");
  EXPECT_EQ(parse_ok(config_normalised(odd)).dims, odd.dims);
}

TEST(ConfigLoad, FileErrors) {
  Result<CompileConfig> r = config_load("/nonexistent/kiln.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/kiln.yaml"), std::string::npos);
  Result<CompileConfig> d = config_load(source_root() / "tests");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
}

TEST(Config, Autotune) {
  const CompileConfig d = parse_ok(kBase);
  EXPECT_EQ(d.autotune, AutotuneMode::kAuto);
  EXPECT_EQ(d.autotune_budget_s, 120);
  const CompileConfig c = parse_ok(kBase + "autotune: {enabled: off, budget_s: 30}\n");
  EXPECT_EQ(c.autotune, AutotuneMode::kOff);
  EXPECT_EQ(c.autotune_budget_s, 30);
  EXPECT_EQ(parse_ok(kBase + "autotune:\n  enabled: on\n").autotune, AutotuneMode::kOn);
  parse_error(kBase + "autotune: {enabled: maybe}\n",
              "autotune.enabled: 'maybe' is not one of auto, on, off");
  parse_error(kBase + "autotune: {budget_s: -1}\n", "autotune.budget_s: -1 is outside [0, 86400]");
  parse_error(kBase + "autotune: {budget: 3}\n",
              "unknown key 'autotune.budget' (allowed: enabled, budget_s)");
  // The mode is part of the key (it changes the artifact); the budget is not.
  EXPECT_NE(config_normalised(c), config_normalised(d));
  CompileConfig e = c;
  e.autotune_budget_s = 5;
  EXPECT_EQ(config_normalised(e), config_normalised(c));
}

TEST(Config, SkinnyGemmMaxM) {
  EXPECT_EQ(parse_ok(kBase).skinny_gemm_max_m, kSkinnyGemmMaxMAuto);
  EXPECT_EQ(parse_ok(kBase + "compilation: {skinny_gemm_max_m: auto}\n").skinny_gemm_max_m,
            kSkinnyGemmMaxMAuto);
  EXPECT_EQ(parse_ok(kBase + "compilation: {skinny_gemm_max_m: 0}\n").skinny_gemm_max_m, 0);
  EXPECT_EQ(parse_ok(kBase + "compilation: {skinny_gemm_max_m: 16}\n").skinny_gemm_max_m, 16);
  parse_error(kBase + "compilation: {skinny_gemm_max_m: 17}\n",
              "compilation.skinny_gemm_max_m: 17 is outside [0, 16] (or auto)");
  parse_error(kBase + "compilation: {skinny_gemm_max_m: -1}\n", "is outside [0, 16]");
  parse_error(kBase + "compilation: {skinny_gemm_max_m: always}\n",
              "compilation.skinny_gemm_max_m");
  // It changes the artifact, so the key; auto normalises to itself.
  const CompileConfig def = parse_ok(kBase);
  EXPECT_NE(config_normalised(parse_ok(kBase + "compilation: {skinny_gemm_max_m: 0}\n")),
            config_normalised(def));
  EXPECT_NE(config_normalised(parse_ok(kBase + "compilation: {skinny_gemm_max_m: 4}\n")),
            config_normalised(def));
  EXPECT_NE(config_normalised(def).find("  skinny_gemm_max_m: auto\n"), std::string::npos);
  EXPECT_EQ(parse_ok(config_normalised(def)).skinny_gemm_max_m, kSkinnyGemmMaxMAuto);
  // The limits: auto takes 16 rows only where the tuner times each GEMM; a number is both.
  for (bool timed : {false, true}) {
    const SkinnyLimits a = skinny_limits(def, timed);
    EXPECT_EQ(a.untimed, 4);
    EXPECT_EQ(a.timed, timed ? 16 : 4);
    const SkinnyLimits n =
        skinny_limits(parse_ok(kBase + "compilation: {skinny_gemm_max_m: 8}\n"), timed);
    EXPECT_EQ(n.untimed, 8);
    EXPECT_EQ(n.timed, 8);
  }
  CompileConfig l0 = def;
  l0.level = 0;
  EXPECT_EQ(skinny_limits(config_at_level(l0), true).timed, 0);
}

TEST(Config, CompilationLevel) {
  EXPECT_EQ(parse_ok(kBase).level, 3);
  EXPECT_EQ(parse_ok(kBase + "compilation: {level: 0}\n").level, 0);
  parse_error(kBase + "compilation: {level: 4}\n", "compilation.level: 4 is outside [0, 3]");
  parse_error(kBase + "compilation: {level: -1}\n", "is outside [0, 3]");
  parse_error(kBase + "compilation: {level: fast}\n", "compilation.level");
  // What each level means for the other keys.
  const CompileConfig full = parse_ok(
      kBase +
      "compilation: {compile_sizes: [1, 8], skinny_gemm_max_m: 8}\nautotune: {enabled: on}\n");
  CompileConfig c = full;
  c.level = 3;
  EXPECT_EQ(config_normalised(config_at_level(c)), config_normalised(full));
  c.level = 2;
  const CompileConfig l2 = config_at_level(c);
  EXPECT_TRUE(l2.compile_sizes.empty());
  EXPECT_EQ(l2.autotune, AutotuneMode::kOff);
  EXPECT_EQ(l2.splitting_ops, full.splitting_ops);
  EXPECT_TRUE(config_fuses(l2));
  c.level = 1;
  const CompileConfig l1 = config_at_level(c);
  EXPECT_TRUE(l1.splitting_ops.empty());
  EXPECT_EQ(l1.skinny_gemm_max_m, 8);
  c.level = 0;
  const CompileConfig l0 = config_at_level(c);
  EXPECT_FALSE(config_fuses(l0));
  EXPECT_EQ(l0.skinny_gemm_max_m, 0);
  // A generation model keeps splitting at attention: its KV cache lives in that op.
  c.kv_cache = KvCacheConfig{};
  EXPECT_EQ(config_at_level(c).splitting_ops, std::vector<std::string>{"attention"});
  // The level is part of the normalised config, so of the cache key.
  std::set<std::string> texts;
  for (int level = 0; level <= kMaxCompilationLevel; ++level) {
    CompileConfig k = full;
    k.level = level;
    const std::string text = config_normalised(config_at_level(k));
    EXPECT_NE(text.find(fmt::format("  level: {}\n", level)), std::string::npos) << text;
    texts.insert(text);
  }
  EXPECT_EQ(texts.size(), 4u);
}

TEST(ConfigNormalised, CanonicalAndRoundTrips) {
  const CompileConfig a = parse_ok(
      "size_dim: tokens\ndims: {seq: 128, heads: 8}\nmax_size: 100\nprecision: fp16\n"
      "targets: [sm_90, sm_80]\ncompilation: {compile_sizes: [1, 16]}\n");
  // The same configuration written differently normalises to the same text.
  const CompileConfig b = parse_ok(
      "compilation:\n  compile_sizes: [1, 16]\n  mode: FULL\n"
      "targets:\n  - sm_80\n  - sm_90\nprecision: fp16\nmax_size: 100\n"
      "dims:\n  heads: 8\n  seq: 128\nsize_dim: tokens\n"
      "# a comment\n");
  EXPECT_EQ(config_normalised(a), config_normalised(b));
  EXPECT_EQ(config_normalised(a),
            "size_dim: \"tokens\"\n"
            "dims: {\"heads\": 8, \"seq\": 128}\n"
            "max_size: 100\n"
            "precision: fp16\n"
            "targets: [\"sm_80\", \"sm_90\"]\n"
            "compilation:\n"
            "  mode: FULL\n"
            "  compile_sizes: [1, 16]\n"
            "  cudagraph_capture_sizes: [1, 2, 4, 8, 16, 32, 64, 100]\n"
            "  splitting_ops: [attention]\n"
            "  skinny_gemm_max_m: auto\n"
            "  level: 3\n"
            "autotune:\n"
            "  enabled: auto\n");
  // The normalised text is itself a valid config describing the same thing.
  const CompileConfig c = parse_ok(config_normalised(a));
  EXPECT_EQ(config_normalised(c), config_normalised(a));
  // Every field changes the text.
  CompileConfig d = a;
  d.capture_sizes.pop_back();
  EXPECT_NE(config_normalised(d), config_normalised(a));
  d = a;
  d.size_dim = "tokens\"";
  EXPECT_NE(config_normalised(d), config_normalised(a));
  EXPECT_EQ(parse_ok(config_normalised(d)).size_dim, "tokens\"");
}

const std::string kKv = kBase + "kv_cache:\n";

TEST(ConfigKvCache, AbsentByDefault) {
  EXPECT_FALSE(parse_ok(kBase).kv_cache.has_value());
  EXPECT_EQ(config_normalised(parse_ok(kBase)).find("kv_cache"), std::string::npos);
}

TEST(ConfigKvCache, DefaultsAndEveryField) {
  CompileConfig c = parse_ok(kKv + "  max_blocks: 128\n  max_sequences: 8\n  max_seq_len: 2048\n");
  ASSERT_TRUE(c.kv_cache.has_value());
  EXPECT_EQ(c.kv_cache->block_size, 16);
  EXPECT_EQ(c.kv_cache->max_blocks, 128);
  EXPECT_EQ(c.kv_cache->memory_fraction, 0.0);
  EXPECT_EQ(c.kv_cache->max_sequences, 8);
  EXPECT_EQ(c.kv_cache->max_seq_len, 2048);
  EXPECT_EQ(c.kv_cache->dtype, DType::kF32);  // fp32 precision
  EXPECT_EQ(c.kv_cache->decode_append, DecodeAppend::kAuto);
  EXPECT_EQ(c.kv_cache->fresh_max_rows(), 4);
  EXPECT_NE(config_normalised(c).find("decode_append: auto"), std::string::npos);
  // Each value round-trips through the normalised text, which tells them apart (the cache key).
  std::set<std::string> normalised;
  for (const auto& [name, value, rows] :
       std::vector<std::tuple<std::string, DecodeAppend, int64_t>>{
           {"separate", DecodeAppend::kSeparate, 0},
           {"in_attention", DecodeAppend::kInAttention, INT64_MAX},
           {"auto", DecodeAppend::kAuto, KvCacheConfig::kAutoFreshMaxRows}}) {
    c = parse_ok(kKv + "  max_blocks: 128\n  max_sequences: 8\n  max_seq_len: 2048\n" +
                 "  decode_append: " + name + "\n");
    EXPECT_EQ(c.kv_cache->decode_append, value) << name;
    EXPECT_EQ(c.kv_cache->fresh_max_rows(), rows) << name;
    EXPECT_EQ(parse_ok(config_normalised(c)).kv_cache->decode_append, value) << name;
    normalised.insert(config_normalised(c));
  }
  EXPECT_EQ(normalised.size(), 3u);
  // The dtype defaults to the compute precision's storage type, wherever precision is written.
  c = parse_ok("kv_cache: {memory_fraction: 0.9, max_sequences: 4, max_seq_len: 64}\n" + kBase +
               "precision: bf16\n");
  EXPECT_EQ(c.kv_cache->dtype, DType::kBF16);
  EXPECT_EQ(c.kv_cache->memory_fraction, 0.9);
  EXPECT_EQ(c.kv_cache->max_blocks, 0);
  EXPECT_EQ(parse_ok(kBase + "precision: tf32\n"
                             "kv_cache: {max_blocks: 4, max_sequences: 1, max_seq_len: 64}\n")
                .kv_cache->dtype,
            DType::kF32);
  c = parse_ok(kKv +
               "  block_size: 256\n  memory_fraction: 1\n  max_sequences: 1048576\n"
               "  max_seq_len: 1\n  dtype: fp16\n");
  EXPECT_EQ(c.kv_cache->block_size, 256);
  EXPECT_EQ(c.kv_cache->memory_fraction, 1.0);
  EXPECT_EQ(c.kv_cache->dtype, DType::kF16);
  // max_blocks exactly one sequence: ceil(100 / 32) = 4.
  EXPECT_EQ(parse_ok(kKv + "  block_size: 32\n  max_blocks: 4\n  max_sequences: 1\n"
                           "  max_seq_len: 100\n")
                .kv_cache->max_blocks,
            4);
  EXPECT_EQ(parse_ok(kKv + "  block_size: 1\n  memory_fraction: 0.001\n  max_sequences: 1\n"
                           "  max_seq_len: 5\n")
                .kv_cache->block_size,
            1);
}

TEST(ConfigKvCache, BadValues) {
  const std::string rest = "  max_sequences: 8\n  max_seq_len: 64\n";
  // {yaml, what the error says}; 64 tokens in blocks of 16 need 4 blocks.
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kKv + "  block_size: 12\n  max_blocks: 64\n" + rest,
       "kiln.yaml:4:3: kv_cache.block_size: 12 is not a power of two"},
      {kKv + "  block_size: 512\n  max_blocks: 64\n" + rest,
       "kiln.yaml:4:3: kv_cache.block_size: 512 is outside [1, 256]"},
      {kKv + "  block_size: 0\n  max_blocks: 64\n" + rest,
       "kv_cache.block_size: 0 is outside [1, 256]"},
      {kKv + "  max_blocks: 64\n  max_sequences: 0\n  max_seq_len: 64\n",
       "kiln.yaml:5:3: kv_cache.max_sequences: 0 is outside [1, 1048576]"},
      {kKv + "  max_blocks: 64\n  max_sequences: 8\n  max_seq_len: 0\n",
       "kiln.yaml:6:3: kv_cache.max_seq_len: 0 is outside [1, 2147483647]"},
      {kKv + "  max_blocks: 3\n" + rest,
       "kiln.yaml:4:3: kv_cache.max_blocks: 3 is outside [4, 2147483647]; the lower bound holds "
       "one sequence of max_seq_len 64 in blocks of 16"},
      {kKv + "  memory_fraction: 1.5\n" + rest,
       "kiln.yaml:4:3: kv_cache.memory_fraction: 1.5 is outside (0, 1]"},
      {kKv + "  memory_fraction: most\n" + rest,
       "kv_cache.memory_fraction: expected a number, got 'most'"},
      {kKv + "  memory_fraction: '0.5'\n" + rest, "expected a number, got the quoted string '0.5'"},
      {kKv + "  max_blocks: 64\n  decode_append: fused\n" + rest,
       "kiln.yaml:5:3: kv_cache.decode_append: 'fused' is not one of separate, in_attention, auto"},
      {kKv + "  max_blocks: 64\n  memory_fraction: 0.5\n" + rest,
       "kiln.yaml:5:3: kv_cache: give one of max_blocks and memory_fraction, not both"},
      {kKv + rest, "kiln.yaml:3:1: kv_cache: missing 'max_blocks' or 'memory_fraction' (give one)"},
      {kKv + "  max_blocks: 64\n  max_seq_len: 64\n",
       "kiln.yaml:3:1: kv_cache: missing required key 'kv_cache.max_sequences'"},
      {kKv + "  max_blocks: 64\n  max_sequences: 8\n",
       "missing required key 'kv_cache.max_seq_len'"},
      {kKv + "  max_blocks: 64\n  dtype: fp8\n" + rest,
       "kiln.yaml:5:3: kv_cache.dtype: 'fp8' is not one of fp32, fp16, bf16"},
      {kKv + "  max_blocks: 64\n  dtype: tf32\n" + rest, "'tf32' is not one of"},
      {kKv + "  max_blocks: 64\n  blocksize: 8\n" + rest,
       "kiln.yaml:5:3: unknown key 'kv_cache.blocksize' (allowed: block_size, max_blocks, "
       "memory_fraction, max_sequences, max_seq_len, dtype, decode_append)"},
      {kBase + "kv_cache: 64\n", "kiln.yaml:3:1: kv_cache: expected a map, got '64'"},
      {kKv + "  max_blocks: many\n" + rest, "kv_cache.max_blocks: expected an integer, got 'many'"},
  };
  for (const auto& [yaml, needle] : cases) parse_error(yaml, needle);
  for (const char* f : {"0", "-0.5", "1.5", "1.0001", ".nan", "inf"})
    parse_error(kKv + "  memory_fraction: " + f + "\n" + rest, "kv_cache.memory_fraction:");
}

TEST(ConfigKvCache, Normalised) {
  const CompileConfig a =
      parse_ok(kBase +
               "precision: fp16\n"
               "kv_cache: {max_seq_len: 4096, max_sequences: 32, memory_fraction: 0.90}\n");
  const std::string text = config_normalised(a);
  EXPECT_NE(text.find("autotune:\n  enabled: auto\n"
                      "kv_cache:\n"
                      "  block_size: 16\n"
                      "  memory_fraction: 0.9\n"
                      "  max_sequences: 32\n"
                      "  max_seq_len: 4096\n"
                      "  dtype: fp16\n"),
            std::string::npos)
      << text;
  // Written differently (defaults spelled out, other order): the same text.
  const CompileConfig b = parse_ok(
      "kv_cache:\n  dtype: fp16\n  block_size: 16\n  max_sequences: 32\n"
      "  memory_fraction: 0.9\n  max_seq_len: 4096\n" +
      kBase + "precision: fp16\n");
  EXPECT_EQ(config_normalised(b), text);
  // Round trip, and every field changes the text.
  EXPECT_EQ(config_normalised(parse_ok(text)), text);
  CompileConfig d = a;
  d.kv_cache->memory_fraction = 0.0;
  d.kv_cache->max_blocks = 4096;
  EXPECT_NE(config_normalised(d).find("  max_blocks: 4096\n"), std::string::npos);
  EXPECT_EQ(config_normalised(parse_ok(config_normalised(d))), config_normalised(d));
  for (auto change : std::vector<void (*)(KvCacheConfig&)>{
           [](KvCacheConfig& k) { k.block_size = 32; },
           [](KvCacheConfig& k) { k.memory_fraction = 0.5; },
           [](KvCacheConfig& k) { k.max_sequences = 31; },
           [](KvCacheConfig& k) { k.max_seq_len = 4095; },
           [](KvCacheConfig& k) { k.dtype = DType::kBF16; },
       }) {
    d = a;
    change(*d.kv_cache);
    EXPECT_NE(config_normalised(d), text);
    EXPECT_EQ(config_normalised(parse_ok(config_normalised(d))), config_normalised(d));
  }
}

}  // namespace
}  // namespace kiln::compiler

namespace kiln::compiler {
namespace {

// One document per file; a second one is an error. And a malformed file on which yaml-cpp's
// LoadAll found empty documents without end (the config fuzz target's first finding, also in
// fuzz/regressions/config/) is a clean syntax error within a second.
TEST(ConfigErrors, OneDocumentAndNoEndlessDocuments) {
  parse_error("size_dim: batch\nmax_size: 64\n---\nmax_size: 8\n", "expected one YAML document");
  EXPECT_EQ(parse_ok("---\nsize_dim: batch\nmax_size: 64\n...\n").max_size, 64);
  const auto start = std::chrono::steady_clock::now();
  std::ifstream in(source_root() / "fuzz/regressions/config/loadall-endless-empty-documents.yaml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(text.empty());
  Result<CompileConfig> r = config_parse(text, "kiln.yaml");
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

}  // namespace
}  // namespace kiln::compiler
