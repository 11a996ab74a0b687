#include "compiler/backend/lower/scan_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {
namespace {

ScanGeometry warp_lines(uint32_t lines) { return {false, 32, 32 * lines, lines}; }
ScanGeometry block_line(int threads) {
  return {false, threads, static_cast<uint32_t>(threads), 1};
}
ScanGeometry columns(uint32_t block) { return {true, 0, block, block}; }

// A line's elements lie >= 32 apart for every S (inner grows with S when it depends on it).
bool far_apart(const ScanKernel& k) { return k.inner.eval(1) >= 32 && k.inner.coef >= 0; }

}  // namespace

ScanGeometry scan_geometry(const ScanKernel& k) {
  if (far_apart(k)) return columns(256);
  if (!k.len.is_constant()) return block_line(256);
  const int64_t len = k.len.offset;
  if (len <= 128) return warp_lines(8);
  int threads = 64;
  while (threads < 1024 && threads * 4 < len) threads *= 2;
  return block_line(threads);
}

std::string scan_geometry_label(const ScanGeometry& g) {
  if (g.columns) return fmt::format("columns block={}", g.block);
  return fmt::format("threads={} lines={}", g.threads_per_line, g.lines_per_block);
}

std::vector<ScanGeometry> scan_candidate_geometries(const ScanKernel& k) {
  const ScanGeometry d = scan_geometry(k);
  std::vector<ScanGeometry> wanted;
  if (d.columns) {
    wanted = {columns(128), columns(512), warp_lines(8), block_line(256)};
  } else {
    wanted = {warp_lines(8), warp_lines(2),    block_line(128), block_line(256),
              block_line(512), block_line(1024), columns(256)};
  }
  std::vector<ScanGeometry> out;
  for (const ScanGeometry& g : wanted) {
    if (g == d || out.size() == 6) continue;
    // A block wider than a constant line leaves threads idle in every chunk.
    if (!g.columns && g.threads_per_line > 32 && k.len.is_constant() &&
        g.threads_per_line > k.len.offset)
      continue;
    out.push_back(g);
  }
  return out;
}

KernelDef codegen_scan(const ScanKernel& k, const ScanGeometry& g) {
  const std::string t(kernel_ctype(k.dtype));
  const char* acc = dtype_is_float(k.dtype) ? "float" : "long long";
  KernelDef def;
  def.params = {fmt::format("const {}* __restrict__ x", t), fmt::format("{}* __restrict__ y", t)};
  const std::string sizes =
      fmt::format("{}, {}, {}", dim_code(k.lines), dim_code(k.len), dim_code(k.inner));
  if (g.columns)
    def.body = fmt::format("  kiln::scan_columns<{}, {}, {}, {}>(x, y, {});\n", t, acc,
                           k.exclusive, k.reverse, sizes);
  else
    def.body = fmt::format("  kiln::scan_lines<{}, {}, {}, {}, {}>(x, y, {});\n", t, acc,
                           g.threads_per_line, k.exclusive, k.reverse, sizes);
  def.max_threads = g.block;
  return def;
}

std::vector<LaunchCandidate> scan_candidates(const ScanKernel& k) {
  std::vector<LaunchCandidate> out;
  for (const ScanGeometry& g : scan_candidate_geometries(k)) {
    LaunchCandidate c;
    c.config = scan_geometry_label(g);
    c.def = codegen_scan(k, g);
    c.work = k.lines;
    c.work_per_block = g.lines_per_block;
    c.block = g.block;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace kiln::compiler
