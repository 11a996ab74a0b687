// The compile configuration (kiln.yaml), parsed and validated. Its YAML form is documented in
// schemas/config.md; every error names the file, line, column and key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/dtype.h"
#include "cache/status.h"
#include "kiln/graph_mode.h"

namespace kiln::compiler {

enum class Precision { kF32, kTF32, kF16, kBF16 };
// kAuto: tune when a GPU of a target arch is present, else only use the tuning database.
// kOn: as kAuto, but no such GPU is an error. kOff: do nothing (not even the database): the
// heuristics and default launch configurations stand.
enum class AutotuneMode { kAuto, kOn, kOff };

std::string_view precision_name(Precision p);         // "fp32", ...
std::string_view autotune_mode_name(AutotuneMode m);  // "auto", "on", "off"
// The storage dtype of a precision: kF32 for fp32 and tf32, kF16, kBF16.
DType precision_storage_dtype(Precision p);

enum class DecodeAppend { kSeparate, kInAttention, kAuto };

// The paged KV cache of LLM generation (`kv_cache:`). The cache holds num_blocks blocks of
// block_size tokens; num_blocks is max_blocks, or (max_blocks 0) as many as memory_fraction of
// the GPU's free memory holds at load. Exactly one of the two is set.
struct KvCacheConfig {
  int64_t block_size = 16;       // a power of two in [1, 256]
  int64_t max_blocks = 0;        // >= ceil(max_seq_len / block_size); 0 when memory_fraction
  double memory_fraction = 0.0;  // in (0, 1]; 0 when max_blocks
  int64_t max_sequences = 0;     // live sequences at once (rows of the block tables)
  int64_t max_seq_len = 0;       // tokens per sequence
  DType dtype = DType::kF32;     // kF32, kF16 or kBF16; default: the precision's storage type
  // `decode_append`: where, on the runtime's decode route, the attention's split kernel writes
  // the step's keys and values into the cache itself (no append launch): at every batch
  // (`in_attention`), at none (`separate`: the append is a launch of its own on every route),
  // or at padded batches up to kAutoFreshMaxRows (`auto`, the default: where the decode route's
  // split kernel measured faster, schemas/config.md). Read through fresh_max_rows().
  DecodeAppend decode_append = DecodeAppend::kAuto;
  // The largest decode batch (rows) whose decode route appends in the attention.
  int64_t fresh_max_rows() const {
    switch (decode_append) {
      case DecodeAppend::kInAttention:
        return INT64_MAX;
      case DecodeAppend::kAuto:
        return kAutoFreshMaxRows;
      default:
        return 0;
    }
  }
  static constexpr int64_t kAutoFreshMaxRows = 4;
};

// compilation.skinny_gemm_max_m: auto (the default; skinny_limits).
inline constexpr int64_t kSkinnyGemmMaxMAuto = -1;
// The most rows a skinny-GEMM kernel takes (compilation.skinny_gemm_max_m's range).
inline constexpr int64_t kSkinnyGemmMaxM = 16;

struct CompileConfig {
  std::string size_dim;                 // the ONNX dim_param that is the run-time size S
  std::map<std::string, int64_t> dims;  // other dim_params bound to constants
  int64_t max_size = 0;                 // every size in [1, max_size] must run
  Precision precision = Precision::kF32;
  std::vector<std::string> targets = {"sm_90"};
  CudaGraphMode mode = CudaGraphMode::kFull;
  std::vector<int64_t> compile_sizes;  // sorted, unique, each in [1, max_size]
  std::vector<int64_t> capture_sizes;  // sorted, unique, each in [1, max_size]
  // GEMMs whose M is at most this at a compile or capture size run a generated skinny-GEMM
  // kernel there instead of cuBLASLt (compiler/backend/lower/skinny_gemm_codegen.h); 0: never.
  // kSkinnyGemmMaxMAuto (the default, `auto`): see skinny_limits.
  int64_t skinny_gemm_max_m = kSkinnyGemmMaxMAuto;
  // Ops the graph is cut at into pieces (PIECEWISE graphs, shared code for identical pieces).
  std::vector<std::string> splitting_ops = {"attention"};
  // compilation.level (`kiln compile -O N`): how much of the pipeline runs, for bisecting a
  // wrong answer (config_at_level). 0: one kernel per op (attention still one op), no other
  // fusion, no splitting; 1: fusion, whole graph; 2: fusion and splitting; 3: 2 plus
  // specialised, autotuned compile sizes.
  int level = 3;
  // Autotuning (GPU present): part of the key, since it changes the artifact; the budget is not.
  AutotuneMode autotune = AutotuneMode::kAuto;
  int64_t autotune_budget_s = 120;
  std::optional<KvCacheConfig> kv_cache;  // absent: no KV cache (not a generation model)
};

// Parses YAML text; `source` names it in messages (usually the file path).
Result<CompileConfig> config_parse(std::string_view yaml_text, std::string_view source);
Result<CompileConfig> config_load(const std::filesystem::path& path);

constexpr int kMaxCompilationLevel = 3;

// What compiling at c.level means for the other keys, applied: below 3 no compile sizes and no
// autotuning; below 2 no splitting_ops; at 0 no skinny GEMMs (and config_fuses() is false). A
// generation model (kv_cache) keeps splitting at attention at every level (its paged KV cache
// lives in the attention op, which runs between pieces). Attention is fused at every level. The
// compiler works on this config, and its normalised text (hence the cache key) holds the level and
// these effective values.
CompileConfig config_at_level(CompileConfig c);

// The skinny-GEMM row limits a compilation uses: `untimed` at every compile and capture size,
// `timed` (>= untimed) at the compile sizes when the tuner times GEMMs there on a GPU
// (`tuner_times`), where it keeps cuBLASLt wherever that measures faster. A number in the config
// is both limits. `auto`: 16 where timed, else 4. Measured on an H200 (schemas/config.md): the
// kernel beats cuBLASLt at 1-4 rows everywhere, and at 5-16 rows for some GEMMs only (GPT-2 small
// at 8 rows), so more rows pay only where each GEMM's choice is timed.
struct SkinnyLimits {
  int64_t untimed = 0, timed = 0;
};
SkinnyLimits skinny_limits(const CompileConfig& c, bool tuner_times);
inline constexpr int64_t kSkinnyAutoUntimedMaxM = 4;

// Whether the front end and the lowering fuse ops (level >= 1).
inline bool config_fuses(const CompileConfig& c) { return c.level >= 1; }

// A canonical text form (sorted keys, defaults filled in) used for hashing into the cache key.
std::string config_normalised(const CompileConfig& c);

}  // namespace kiln::compiler
