// Layout kernels: generated data movement. Every kernel is a grid-stride loop (so any launch
// size is correct) whose index arithmetic is written with the sizes baked in (dim_code), and
// moves 16-byte vectors where the row length and every offset allow it for every S. Each
// codegen call takes a launch configuration (LayoutConfig); layout_candidates lists those the
// launch tuner times against the default.
//
// Sizes and strides are products of dims, which need not be linear in S (a stride of 64·S
// times a dim S+1), so they are kept as `Mono`s: a constant times dims that depend on S.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backend/launch_plan.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

// c · f0 · f1 ⋯ with every f an S-dependent dim, kept sorted so equal products compare equal.
struct Mono {
  int64_t c = 1;
  std::vector<ir::DimExpr> f;

  static Mono of(const ir::DimExpr& d);
  Mono times(const Mono& o) const;
  bool is_const(int64_t v) const { return f.empty() && c == v; }
  std::string code() const;  // C++ expression in S
  int64_t divisor() const;   // a number that divides the product for every S (0 for 0)
  int64_t eval(int64_t s) const;
  friend bool operator==(const Mono&, const Mono&) = default;
};

Mono mono_numel(const ir::Shape& s, size_t from = 0, size_t to = SIZE_MAX);
// Row-major strides (in elements) of a tensor of shape s.
std::vector<Mono> mono_strides(const ir::Shape& s);

// out[i] = in[base + Σ coord_k · in_strides[k]] over the output (row-major, contiguous).
// Transpose, Slice, view copies.
struct StridedCopy {
  std::string elem;  // kernel_ctype of the data
  std::vector<Mono> out_dims;
  std::vector<Mono> in_strides;
  std::vector<Mono> base;  // a sum of terms (element offset of the first element read)
  // The output's kernel_ctype when it differs from `elem` (floats only): each element converted
  // through fp32, one at a time. Empty: a plain copy.
  std::string out_elem;
};

// A launch configuration. Grid-stride kernels: `block` threads, the grid sized for `items` work
// items (elements or vectors) per thread; the loop covers the rest, so any grid is correct. The
// tiled transpose: a block of 32 x block/32 threads moves a 32x32 tile (32 / (block/32) rows per
// thread), the grid sized for `items` tiles per block. The default is {256, 1}.
struct LayoutConfig {
  uint32_t block = 256;
  uint32_t items = 1;
};

// How a copy became a kernel in one configuration: its launch geometry follows.
struct LayoutKernel {
  KernelDef def;     // def.max_threads == block
  ir::DimExpr work;  // items for the grid (elements, vectors or tiles' worth of elements)
  uint32_t work_per_block = 256;
  uint32_t block = 256;
  std::string path;    // "vector4", "scalar", "tiled": for tests and diagnostics
  std::string config;  // "block=256 items=1", "threads=32x8 tiles=1"
};

// A codegen call with everything but the configuration bound.
using LayoutCodegen = std::function<LayoutKernel(const LayoutConfig&)>;
// Alternatives to the default `gen({})` for the launch tuner (compiler/backend/launch_plan.h), in a
// fixed order. Grid-stride kernels: 128, 512 and 1024 threads, and 256 threads with the grid
// sized for 4 items per thread (when the work does not depend on S, those that launch the same
// blocks as the default or leave most of a block idle are left out). The tiled transpose:
// 32x4, 32x16 and 32x32 threads per tile.
std::vector<LaunchCandidate> layout_candidates(const LayoutCodegen& gen);

// `numel` is the output's element count (linear in S).
LayoutKernel codegen_strided_copy(const StridedCopy& c, const ir::DimExpr& numel,
                                  const LayoutConfig& config = {});

// Concat (`split` false: inputs are the pieces, one output) or Split (one input, outputs are the
// pieces): `outer` blocks, each the pieces' `lens` elements in order.
struct ChunkCopy {
  std::string elem;
  Mono outer;
  std::vector<Mono> lens;
  bool split = false;
};
LayoutKernel codegen_chunk_copy(const ChunkCopy& c, const ir::DimExpr& numel,
                                const LayoutConfig& config = {});

// ONNX Gather: out[o, j, :] = data[o, index(idx[j]), :], rows of `inner` elements.
struct GatherRows {
  std::string elem, index_elem;
  Mono outer, len, inner, nidx;
};
LayoutKernel codegen_gather_rows(const GatherRows& g, const ir::DimExpr& numel,
                                 const LayoutConfig& config = {});

// ONNX GatherND (batch_dims 0): the indices are `nidx` tuples of `lens.size()` (K) indices;
// tuple j picks data[i0, ..., iK-1, :], a row of `inner` elements, into out[j, :].
struct GatherNd {
  std::string elem, index_elem;
  std::vector<ir::DimExpr> lens;  // the data's first K dims
  std::vector<Mono> strides;      // their strides in the data (elements)
  Mono inner, nidx;
};
LayoutKernel codegen_gather_nd(const GatherNd& g, const ir::DimExpr& numel,
                               const LayoutConfig& config = {});

// ONNX GatherElements: out has the indices' shape; axis `axis` reads data at the index.
struct GatherElements {
  std::string elem, index_elem;
  ir::Shape idx_shape;
  std::vector<Mono> data_strides;
  ir::DimExpr axis_len;
  size_t axis = 0;
};
LayoutKernel codegen_gather_elements(const GatherElements& g, const ir::DimExpr& numel,
                                     const LayoutConfig& config = {});

// ONNX Range: out[i] = start + i · delta (integers: exact; floats: in double, then rounded).
struct RangeFill {
  std::string elem;
  bool is_float = false;
  ir::DimExpr start;  // integer start
  int64_t delta = 1;
  double fstart = 0, fdelta = 1;
};
// A fill this simple has no candidates; it always runs the default configuration.
LayoutKernel codegen_range(const RangeFill& r, const ir::DimExpr& numel);

// kiln.Rotary: out = X [..., D] rotated by cos/sin tables that broadcast over X's leading dims,
// the rows of X read contiguously or as a strided view of another buffer (the views that feed
// it, absorbed: a slice of a fused QKV product with its heads transposed). With `second`, one
// launch computes two rotary outputs over the same tables and the same buffer (K beside Q): `out`
// then `out2`, elements n0 + n1, where `numel` counts both. A thread takes a unit of a row at
// a time: up to 16 bytes' worth of pairs (kiln::layout_rotary_pairs), or a run of the elements
// past the rotary dims; reads and writes are vectors as wide as the row offsets allow.
struct RotaryKernel {
  struct Part {
    ir::Shape x_lead;  // X's leading dims
    // Strided view: the element offset and one stride per leading dim (the last axis steps by
    // 1). Empty: X is contiguous.
    std::vector<ir::DimExpr> x_lead_strides;
    ir::DimExpr x_offset;
  };
  std::string elem, table_elem;
  Part x;
  ir::Shape table_lead;  // the tables' leading dims (right-aligned against x_lead)
  int64_t d = 0, rotary_dim = 0, table_width = 0;
  bool interleaved = false;
  std::optional<Part> second;
};
LayoutKernel codegen_rotary(const RotaryKernel& r, const ir::DimExpr& numel,
                            const LayoutConfig& config = {});

}  // namespace kiln::compiler
