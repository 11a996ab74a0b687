// The GEMM tuning database: decisions of earlier autotuning runs, so a compile (with or without a
// GPU) reuses them instead of timing again. A text file, one decision per line:
//
//   arch=sm_90 cublaslt=130001 compute=F16 epilogue=BIAS_GELU trans_a=0 trans_b=0 has_c=0
//   m=1024 n=3072 k=768 batch=1 stride_a=0 stride_b=0 stride_d=0 | algo_id=66 tile=20 stages=19
//   split_k=1 reduction_scheme=0 cta_swizzle=0 custom_option=0 cluster_shape=0 inner_shape=0
//   workspace_bytes=0 ms=0.0123 heuristic_ms=0.0150
//
// (one line in the file; wrapped here). The key (before '|') names everything that changes which
// algorithm is valid and fastest; '#' starts a comment line. Saving writes a temporary file and
// renames it over the old one, so a crash never leaves half a database.
//
// Generated kernels' launch configurations are lines that start with the word "kernel":
//
//   kernel arch=sm_90 symbol=kiln_layernorm_1f2e3d4c5b6a7980 size=64 | config=threads=64,rows=4
//   ms=0.0102 default_ms=0.0113
//
// The symbol names the default kernel by the hash of its text, which bakes in every shape; the
// config is the winning configuration's name (spaces written as ','), the default's own name when
// the default was fastest.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::compiler {

struct TuningKey {
  std::string arch;  // "sm_90"
  int64_t cublaslt_version = 0;
  std::string compute;   // "F32", "TF32", "F16", "BF16"
  std::string epilogue;  // "NONE", "BIAS", "BIAS_GELU", ...
  bool trans_a = false, trans_b = false, has_c = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;  // elements; 0 without a batch or broadcast
  std::string to_string() const;  // the key half of a line, canonical (fields in fixed order)
};

struct TuningEntry {
  schema::GemmAlgo algo;    // size and source unset
  double ms = 0;            // measured time of the chosen algorithm
  double heuristic_ms = 0;  // measured time of cuBLASLt's first choice
};

struct KernelTuningKey {
  std::string arch;    // "sm_90"
  std::string symbol;  // the default kernel's symbol (KernelDef::symbol)
  int64_t size = 0;    // the compile size
  std::string to_string() const;  // the key half of a kernel line
};

struct KernelTuningEntry {
  std::string config;     // LaunchCandidate::config of the winner, or KernelLaunch::config
  double ms = 0;          // measured time of the winner
  double default_ms = 0;  // measured time of the default
};

class TuningDb {
 public:
  // A missing file is an empty database; a malformed one is an error naming "file:line".
  static Result<TuningDb> load(const std::filesystem::path& path);
  // Writes every entry (sorted by key) to `path` atomically (temporary file + rename).
  Status save(const std::filesystem::path& path) const;

  const TuningEntry* find(const TuningKey& key) const;
  void put(const TuningKey& key, const TuningEntry& entry);
  const KernelTuningEntry* find(const KernelTuningKey& key) const;
  void put(const KernelTuningKey& key, const KernelTuningEntry& entry);
  size_t size() const { return entries_.size() + kernel_entries_.size(); }

  // One line (without the newline) and its parser; errors say which field is wrong.
  static std::string format_line(const TuningKey& key, const TuningEntry& entry);
  static Status parse_line(std::string_view line, TuningKey* key, TuningEntry* entry);
  static std::string format_kernel_line(const KernelTuningKey& key,
                                        const KernelTuningEntry& entry);
  static Status parse_kernel_line(std::string_view line, KernelTuningKey* key,
                                  KernelTuningEntry* entry);

 private:
  std::map<std::string, std::pair<TuningKey, TuningEntry>> entries_;  // by key.to_string()
  std::map<std::string, std::pair<KernelTuningKey, KernelTuningEntry>> kernel_entries_;
};

}  // namespace kiln::compiler
