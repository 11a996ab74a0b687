#include "compiler/backend/lower/reduce_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/backend/kernel_codegen.h"

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

std::string row_geometry_label(const RowGeometry& geo) {
  return fmt::format("threads={} rows={} vec={}", geo.threads_per_row, geo.rows_per_block, geo.vec);
}

namespace {

RowGeometry warp_rows(int rows, int vec) {
  return {vec, 32, static_cast<uint32_t>(32 * rows), static_cast<uint32_t>(rows)};
}

RowGeometry block_row(int threads, int vec) {
  return {vec, threads, static_cast<uint32_t>(threads), 1};
}

}  // namespace

// The default's neighbours, one step in each direction first:
// - a warp per row (rows <= 1024 elements): 4 or 1 rows per block instead of 8 (a small batch
//   spread over more SMs), 2 or 4 warps per row (a long row's serial loop shortened; one row per
//   block, which on sm_80+ keeps full occupancy at 64 threads), and the next narrower vector
//   (more lanes busy on a short row);
// - a block per row: the powers of two just below and above its size (fewer threads with more
//   vectors each, or more with fewer), a warp per row (no block barrier, 8 rows per block), the
//   next narrower vector, then the powers of two two steps away.
// Pruned: a group of more than 32 threads with more threads than vectors (idle threads), and,
// for a kernel that holds its row in registers, more than 64 values per thread (32 at 1024
// threads, where __launch_bounds__ leaves 64 registers): beyond that the row risks spilling to
// local memory (ptxas -v on sm_90: 64 floats at 64 to 256 threads do not spill).
std::vector<RowGeometry> row_candidate_geometries(int64_t cols, DType dtype, bool holds_row) {
  const RowGeometry d = row_geometry(cols, dtype);
  const int vec = d.vec, narrow = d.vec / 2;
  std::vector<RowGeometry> wanted;
  if (d.threads_per_row == 32) {
    wanted = {warp_rows(4, vec),   warp_rows(1, vec),    block_row(64, vec),
              block_row(128, vec), warp_rows(8, narrow), warp_rows(2, vec)};
  } else {
    const int t = d.threads_per_row;
    int below = 1024, above = 64;
    while (below >= t) below /= 2;
    while (above <= t) above *= 2;
    wanted = {block_row(below, vec), block_row(above, vec),     warp_rows(8, vec),
              block_row(t, narrow),  block_row(below / 2, vec), block_row(above * 2, vec)};
  }
  std::vector<RowGeometry> out;
  for (const RowGeometry& g : wanted) {
    const int threads = g.threads_per_row;
    if (g.vec < 1 || threads < 32 || threads > 1024 || g == d) continue;
    if (std::find(out.begin(), out.end(), g) != out.end()) continue;
    const int64_t vectors = cols / g.vec;
    if (threads > 32 && vectors < threads) continue;
    const int64_t values = (vectors + threads - 1) / threads * g.vec;
    if (holds_row && values > std::min<int64_t>(64, 32768 / g.block)) continue;
    out.push_back(g);
  }
  return out;
}

std::vector<LaunchCandidate> reduce_candidates(const RowKernel& k) {
  std::vector<LaunchCandidate> out;
  for (const RowGeometry& g : row_candidate_geometries(k.cols, k.dtype, k.holds_row)) {
    LaunchCandidate c;
    c.config = row_geometry_label(g);
    c.def = k.codegen(g);
    c.work = k.rows;
    c.work_per_block = g.rows_per_block;
    c.block = g.block;
    out.push_back(std::move(c));
  }
  return out;
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

void emit_row_kernel(LowerContext& cx, int node, const RowKernel& k, std::vector<KernelArgRef> args,
                     const std::string& nodes, bool before_cublaslt) {
  const RowGeometry geo = row_geometry(k.cols, k.dtype);
  KernelLaunch launch;
  launch.kernel = cx.add_kernel(k.prefix, k.codegen(geo));
  launch.args = std::move(args);
  launch.args.push_back(KernelArgRef::size());
  launch.work = k.rows;
  launch.work_per_block = geo.rows_per_block;
  launch.block = geo.block;
  launch.nodes = nodes;
  launch.candidates = reduce_candidates(k);
  if (!launch.candidates.empty()) launch.config = row_geometry_label(geo);
  launch.before_cublaslt = before_cublaslt;
  cx.emit(node, std::move(launch));
}

}  // namespace kiln::compiler
