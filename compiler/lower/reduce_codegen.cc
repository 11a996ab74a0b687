#include "compiler/lower/reduce_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/kernel_codegen.h"

namespace kiln::compiler {

RowGeometry row_geometry(int64_t cols, DType dtype) {
  RowGeometry g;
  const int64_t size = static_cast<int64_t>(std::max<size_t>(1, dtype_size(dtype)));
  for (int64_t n = 16 / size; n >= 1; n /= 2)
    if (cols % n == 0) {
      g.vec = static_cast<int>(n);
      break;
    }
  if (cols <= 1024) return g;  // a warp per row
  const int64_t vectors = cols / g.vec;
  int64_t threads = ((vectors + 3) / 4 + 31) / 32 * 32;
  threads = std::clamp<int64_t>(threads, 64, 1024);
  g.threads_per_row = static_cast<int>(threads);
  g.block = static_cast<uint32_t>(threads);
  g.rows_per_block = 1;
  return g;
}

namespace {

std::string ptr(DType t, const char* name, bool is_const) {
  return fmt::format("{}{}* __restrict__ {}", is_const ? "const " : "", kernel_ctype(t), name);
}

KernelDef with_bounds(KernelDef def, const RowGeometry& geo) {
  def.max_threads = geo.block;
  return def;
}

}  // namespace

KernelDef codegen_norm(const NormKernel& k, const RowGeometry& geo) {
  KernelDef def;
  const std::string t(kernel_ctype(k.dtype));
  def.params.push_back(ptr(k.dtype, "x", true));
  if (k.residual >= 0) def.params.push_back(ptr(k.dtype, "r", true));
  if (k.sum >= 0) def.params.push_back(ptr(k.dtype, "sum", false));
  def.params.push_back(ptr(k.dtype, "scale", true));
  if (k.bias >= 0) def.params.push_back(ptr(k.dtype, "bias", true));
  def.params.push_back(ptr(k.dtype, "y", false));
  def.body = fmt::format(
      "  kiln::norm_rows<{}, {}, {}, {}, {}, {}, {}, {}>(x, {}, {}, scale, {}, y, {}, {});\n", t,
      k.cols, geo.vec, geo.threads_per_row, k.rms, k.residual >= 0, k.sum >= 0, k.bias >= 0,
      k.residual >= 0 ? "r" : "nullptr", k.sum >= 0 ? "sum" : "nullptr",
      k.bias >= 0 ? "bias" : "nullptr", dim_code(k.rows), float_literal(k.epsilon));
  return with_bounds(std::move(def), geo);
}

KernelDef codegen_softmax(DType dtype, int64_t cols, const ir::DimExpr& rows,
                          const RowGeometry& geo) {
  KernelDef def;
  def.params = {ptr(dtype, "x", true), ptr(dtype, "y", false)};
  def.body = fmt::format("  kiln::softmax_rows<{}, {}, {}, {}>(x, y, {});\n", kernel_ctype(dtype),
                         cols, geo.vec, geo.threads_per_row, dim_code(rows));
  return with_bounds(std::move(def), geo);
}

KernelDef codegen_row_reduce(DType in, DType out, int kind, int64_t cols, const ir::DimExpr& rows,
                             const RowGeometry& geo) {
  KernelDef def;
  def.params = {ptr(in, "x", true), ptr(out, "y", false)};
  def.body =
      fmt::format("  kiln::reduce_rows<{}, {}, {}, {}, {}, {}>(x, y, {});\n", kernel_ctype(in),
                  kernel_ctype(out), cols, geo.vec, geo.threads_per_row, kind, dim_code(rows));
  return with_bounds(std::move(def), geo);
}

void emit_row_kernel(LowerContext& cx, int node, int kernel, std::vector<KernelArgRef> args,
                     const ir::DimExpr& rows, const RowGeometry& geo, const std::string& nodes) {
  KernelLaunch launch;
  launch.kernel = kernel;
  launch.args = std::move(args);
  launch.args.push_back(KernelArgRef::size());
  launch.work = rows;
  launch.work_per_block = geo.rows_per_block;
  launch.block = geo.block;
  launch.nodes = nodes;
  cx.emit(node, std::move(launch));
}

}  // namespace kiln::compiler
