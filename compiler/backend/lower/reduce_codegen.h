// Row-reduction kernels (kernels/reduce.cuh): how a row of `cols` elements is split over
// threads, the launch candidates (other splits of the same row), and the generated entry points
// for norms, softmax and last-axis reductions. The lowering rules are in lower_reduce.cc; the
// residual hooks below let the elementwise family hand an Add that feeds a norm to this family.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cache/dtype.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/backend/lower/lower_context.h"
#include "compiler/backend/lower/skinny_gemm_codegen.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// How a row is split: `threads_per_row` (G) threads share a row, each taking vectors of `vec`
// (N) elements. G is a warp (32; `rows_per_block` rows per block of 32 * rows threads) or the
// whole block (G == block, a multiple of 32 up to 1024, one row per block): the two shapes
// kernels/reduce.cuh implements.
struct RowGeometry {
  int vec = 1;
  int threads_per_row = 32;
  uint32_t block = 256;
  uint32_t rows_per_block = 8;
  bool operator==(const RowGeometry&) const = default;
};
// The default: a warp for rows up to 1024 elements (8 rows per 256-thread block), else a block
// sized for about 4 vectors per thread. N: the widest vector (16 bytes or less) that divides the
// row.
RowGeometry row_geometry(int64_t cols, DType dtype);
// "threads=32 rows=8 vec=4": the name of a geometry in launch configs and the tuning database.
std::string row_geometry_label(const RowGeometry& geo);

// The other geometries worth timing for a row of `cols` elements of `dtype` (at most 6, never
// the default, in a fixed order). `holds_row`: the kernel keeps its part of the row in registers
// (norms, softmax), which rules out groups that leave each thread too many values to hold.
std::vector<RowGeometry> row_candidate_geometries(int64_t cols, DType dtype, bool holds_row);

// A row kernel before its geometry is chosen: the default launch and every candidate are
// `codegen` of a geometry, so all share one parameter list.
struct RowKernel {
  std::string prefix;  // kernel symbol prefix: "kiln_layernorm", "kiln_softmax", ...
  int64_t cols = 0;
  DType dtype = DType::kF32;  // the row's storage type (it sets the vector width)
  bool holds_row = true;      // see row_candidate_geometries
  ir::DimExpr rows;
  std::function<KernelDef(const RowGeometry&)> codegen;
};
// The launch candidates of `k`: one per row_candidate_geometries entry.
std::vector<LaunchCandidate> reduce_candidates(const RowKernel& k);

// What one norm kernel computes; value ids (-1 when absent).
struct NormKernel {
  bool rms = false;
  DType dtype = DType::kF32;
  int64_t cols = 0;
  ir::DimExpr rows;
  float epsilon = 1e-5f;
  int x = -1, residual = -1, sum = -1, scale = -1, bias = -1, y = -1;
};
KernelDef codegen_norm(const NormKernel& k, const RowGeometry& geo);
KernelDef codegen_softmax(DType dtype, int64_t cols, const ir::DimExpr& rows,
                          const RowGeometry& geo);
// kind: 0 sum, 1 mean, 2 max.
KernelDef codegen_row_reduce(DType in, DType out, int kind, int64_t cols, const ir::DimExpr& rows,
                             const RowGeometry& geo);

// Emits a row kernel's launch, one thread group per row, in the default geometry
// (row_geometry), with its candidates; `before_cublaslt`: KernelLaunch::before_cublaslt.
void emit_row_kernel(LowerContext& cx, int node, const RowKernel& k, std::vector<KernelArgRef> args,
                     const std::string& nodes, bool before_cublaslt = false);

// The LayerNormalization / RMSNormalization node that can take Add node `add` as its fused
// residual (same shape, no broadcast, its other inputs ready), or -1.
int residual_norm_consumer(const LowerContext& cx, int add);
// Lowers `add` and `norm` into one kernel: writes the sum only when something else reads it.
Status lower_norm_with_residual(LowerContext& cx, int add, int norm);

// Norm prologues. A LayerNormalization / RMSNormalization over the last axis whose only reader,
// through row views, is the A operand of a GEMM (MatMul, Gemm, kiln.GatedMatMul) in its piece is
// left to that GEMM (LowerContext::defer_norm): where the GEMM runs a skinny kernel, the kernel
// normalises A's rows itself and the norm's launch is saved. The GEMM's rule takes the norm off
// the list and calls these, emitting the norm before its own steps.
// The skinny kernel's view of deferred norm `node`.
Result<SkinnyNorm> deferred_norm_prologue(const LowerContext& cx, int node);
// Emits deferred norm `node`'s kernel; `before_cublaslt`: it runs only where the GEMM runs on
// cuBLASLt (the skinny kernel applies it elsewhere).
Status emit_deferred_norm(LowerContext& cx, int node, bool before_cublaslt);

}  // namespace kiln::compiler
