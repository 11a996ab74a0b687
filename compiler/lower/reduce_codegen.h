// Row-reduction kernels (kernels/reduce.cuh): how a row of `cols` elements is split over
// threads, and the generated entry points for norms, softmax and last-axis reductions. The
// lowering rules are in lower_reduce.cc; the residual hooks below let the elementwise family
// hand an Add that feeds a norm to this family.
#pragma once

#include <cstdint>
#include <string>

#include "cache/dtype.h"
#include "compiler/ir.h"
#include "compiler/launch_plan.h"
#include "compiler/lower/lower_context.h"

namespace kiln::compiler {

// G threads per row: a warp for rows up to 1024 elements (8 rows per 256-thread block), else
// a block sized for about 4 vectors per thread. N: the widest vector (16 bytes or less) that
// divides the row.
struct RowGeometry {
  int vec = 1;
  int threads_per_row = 32;
  uint32_t block = 256;
  uint32_t rows_per_block = 8;
};
RowGeometry row_geometry(int64_t cols, DType dtype);

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

// Emits a row kernel's launch: one thread group per row.
void emit_row_kernel(LowerContext& cx, int node, int kernel, std::vector<KernelArgRef> args,
                     const ir::DimExpr& rows, const RowGeometry& geo, const std::string& nodes);

// The LayerNormalization / RMSNormalization node that can take Add node `add` as its fused
// residual (same shape, no broadcast, its other inputs ready), or -1.
int residual_norm_consumer(const LowerContext& cx, int add);
// Lowers `add` and `norm` into one kernel: writes the sum only when something else reads it.
Status lower_norm_with_residual(LowerContext& cx, int add, int norm);

}  // namespace kiln::compiler
