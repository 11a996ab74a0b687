// Prefix-sum kernels (kernels/scan.cuh): how the lines of a CumSum are spread over threads, the
// launch candidates (other spreads of the same lines), and the generated entry point. The
// lowering rule is in lower_scan.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// What one CumSum computes: the tensor as [outer, len, inner] has `lines` = outer · inner lines
// of `len` elements, `inner` apart. Each may depend on S.
struct ScanKernel {
  DType dtype = DType::kF32;  // storage of input and output: f32, f16, bf16, i32 or i64
  bool exclusive = false, reverse = false;
  ir::DimExpr lines, len, inner;
};

// `columns`: a thread per line (scan_columns), `block` threads per block. Otherwise
// `threads_per_line` (G) threads scan a line (scan_lines): a warp (G == 32, `lines_per_block`
// lines per block of 32 · lines threads) or the whole block (G == block, one line per block).
struct ScanGeometry {
  bool columns = false;
  int threads_per_line = 32;
  uint32_t block = 256;
  uint32_t lines_per_block = 8;
  bool operator==(const ScanGeometry&) const = default;
};

// The default: a thread per line when a line's elements lie >= 32 apart at every S (coalesced
// serial scans); else a warp per line for lines of at most 128 elements, a block of about a
// quarter of the line's length (64 to 1024 threads) for longer constant lines, and 256 threads
// when the length depends on S.
ScanGeometry scan_geometry(const ScanKernel& k);
// "columns block=256" or "threads=256 lines=1": the name in launch configs and the tuning
// database.
std::string scan_geometry_label(const ScanGeometry& g);
// Other geometries worth timing (at most 6, never the default, in a fixed order): the line scan
// with a warp or 64 to 1024 threads (none wider than a constant line), and the column scan.
std::vector<ScanGeometry> scan_candidate_geometries(const ScanKernel& k);

KernelDef codegen_scan(const ScanKernel& k, const ScanGeometry& g);
// The default launch's kernel and geometry, and its candidates.
std::vector<LaunchCandidate> scan_candidates(const ScanKernel& k);

}  // namespace kiln::compiler
