// Skinny GEMMs (kernels/skinny_gemm.cuh): the generated alternative to cuBLASLt for a GEMM step
// at the planned sizes where its M is at most kSkinnyMaxM (decode steps, single tokens). There
// cuBLASLt's tiles cover a handful of SMs and its split-K adds a reduce launch; the skinny kernel
// spreads the weight rows over every SM and reads each weight once, at memory bandwidth.
//
// The pair in the program: a KernelLaunch gated to those sizes (run_sizes), then the GemmLaunch
// with the same list as skinny_sizes (skipped there). Both read the weight as [N, K]: a [K, N]
// weight constant that only this GEMM reads is transposed at compile time (cuBLASLt then runs
// it with trans_b, its preferred layout). The autotuner times the kernel's geometries at the
// compile sizes and then the kernel against cuBLASLt, dropping a size where cuBLASLt wins.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "cache/status.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/backend/lower/lower_context.h"

namespace kiln::compiler {

// The largest M a skinny GEMM takes.
inline constexpr int64_t kSkinnyMaxM = 16;

// A LayerNorm or RMSNorm over the rows of A that the skinny kernel applies itself
// (kernels/skinny_gemm.cuh, "Norm prologue"): the kernel reads the norm's input `x` in place of
// A. Value ids (resolved); bias -1 when none (always for RMSNorm).
struct SkinnyNorm {
  bool rms = false;
  int x = -1, scale = -1, bias = -1;
  float epsilon = 1e-5f;
};

// kernels/skinny_gemm.cuh's SkinnyNormKind.
enum class NormPrologue { kNone = 0, kRms = 1, kLayer = 2, kLayerBias = 3 };

// The activation of a gated GEMM's gate (kiln.GatedMatMul's `activation`); kNone: not gated.
enum class GateAct { kNone, kSilu, kGelu, kGeluTanh, kRelu };

// What one skinny kernel computes (kernels/skinny_gemm.cuh).
struct SkinnyGemm {
  DType dtype = DType::kF32;
  int64_t k = 0, n = 0;  // n: rows of W (for a gated GEMM twice the output's columns)
  ir::DimExpr m;
  int max_m = 1;  // activation rows per pass (a power of two <= kSkinnyMaxM)
  Epilogue epilogue = Epilogue::kNone;
  bool has_c = false;
  // Gated (kernels/skinny_gemm.cuh, "Gated form"): W's rows are (gate, up) pairs and D is
  // [M, n / 2]; no bias, no C.
  GateAct gate = GateAct::kNone;
  // A norm of A's rows applied first (both forms), with its epsilon.
  NormPrologue norm = NormPrologue::kNone;
  float norm_epsilon = 0.0f;
};

// How the work is split (see the kernel's header comment): chunk is the number of each lane's
// weight vectors (per row of W) in flight at once. mma_ksplit > 0 adds the tensor-core form
// (fp16 and bf16), which takes every size where M > 1: its groups own 16 rows of W, split K
// mma_ksplit ways and keep mma_chunk warp steps of 64 along K in flight; the CUDA-core form then
// runs only where M = 1.
struct SkinnyGeometry {
  int vec = 1, rows = 1, ksplit = 1, warps = 4, chunk = 1;
  int mma_ksplit = 0, mma_chunk = 0;
  bool operator==(const SkinnyGeometry&) const = default;
};

// The default (one row, and the general kernel): the CUDA-core form with 16-byte weight loads, K
// split until each lane holds about four vectors of a row (all loaded at once), two rows of W
// per group where K is short and N long.
SkinnyGeometry skinny_geometry(const SkinnyGemm& s);
// The lowering's choice from 3 rows (from 5 at a compile size, where the default kernel is
// specialised: skinny_gemm_codegen.cc): for fp16 and bf16 with max_m >= 2 and K a multiple of 8,
// the default with the tensor-core form added, whose time hardly grows with M where the
// CUDA-core sums grow with every row (decode steps on an H200, Llama 0.85B at batch 4, general
// kernels: 1.058 against 1.479 ms); at M = 1 its larger block makes it 5-20% slower, and at
// M = 2 it measured no faster (slower for GPT-2 small), so those keep the default. nullopt where
// the GEMM does not take the tensor-core form.
std::optional<SkinnyGeometry> skinny_rows_geometry(const SkinnyGemm& s);
// Other geometries worth timing (at most 9, never the default): skinny_rows_geometry first.
std::vector<SkinnyGeometry> skinny_candidate_geometries(const SkinnyGemm& s);
// "rows=2 ksplit=4 warps=4 vec=8 chunk=4" (with " mma_ksplit=8 mma_chunk=4" when it has the
// tensor-core form): the name in launch configs and the tuning database.
std::string skinny_geometry_label(const SkinnyGeometry& geo);
// Parameters: a, w, [norm scale], [norm bias], [bias], [c], d, alpha, beta.
KernelDef codegen_skinny_gemm(const SkinnyGemm& s, const SkinnyGeometry& geo);
// The gated epilogue alone, where cuBLASLt computed the product (kernels/skinny_gemm.cuh,
// gated_pairs): parameters t ([M, 2N], pairs interleaved), out ([M, N]); `outputs` is M * N.
// `vec` outputs a thread (gated_pairs_vec), `block` threads a block (kGatedPairsBlock by
// default; kGatedPairsBlockCandidates are the autotuner's others).
inline constexpr uint32_t kGatedPairsBlock = 256;
inline constexpr uint32_t kGatedPairsBlockCandidates[] = {128, 512};
KernelDef codegen_gated_pairs(DType dtype, GateAct act, const ir::DimExpr& outputs, int vec = 1,
                              uint32_t block = kGatedPairsBlock);
// Outputs a thread of gated_pairs for N outputs a row: the most whose 2·vec inputs fill at most
// 16 bytes and that divides N.
int gated_pairs_vec(DType dtype, int64_t n);

// A skinny kernel's gated launch, and whether it applies the norm it was given.
struct SkinnyLaunch {
  KernelLaunch launch;
  bool norm_prologue = false;
};

// A skinny kernel for `gemm` (lowered from node `node`, not yet emitted) at the planned sizes
// where its M is small, when its shape allows (no batch, A not transposed, B available as
// [N, K]): returns the gated kernel launch (for the caller to emit right before the GEMM) and
// sets gemm.skinny_sizes; else nullopt, gemm unchanged. With `norm`, the kernel normalises A's
// rows itself where it can, reading norm->x (the GEMM still reads A: the norm's output).
std::optional<SkinnyLaunch> skinny_gemm_launch(LowerContext& cx, int node, GemmLaunch& gemm,
                                               const SkinnyNorm* norm);
// The same for a gated GEMM (kiln.GatedMatMul): `gemm` computes the [M, 2N] product of (gate,
// up) column pairs into gemm.d; the skinny kernel, where it runs, writes act(gate) * up straight
// into `out` ([M, N]) instead.
std::optional<SkinnyLaunch> skinny_gemm_launch_gated(LowerContext& cx, int node, GemmLaunch& gemm,
                                                     GateAct act, int out, const SkinnyNorm* norm);

}  // namespace kiln::compiler
