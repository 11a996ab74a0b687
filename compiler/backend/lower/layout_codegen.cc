#include "compiler/backend/lower/layout_codegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "compiler/backend/kernel_codegen.h"

namespace kiln::compiler {
namespace {

constexpr const char* kLoop =
    "  for (long long i = kiln::global_thread_index(); i < n; i += kiln::global_thread_count()) "
    "{\n";

int64_t elem_bytes(const std::string& elem) {
  if (elem == "long long") return 8;
  if (elem == "float" || elem == "int") return 4;
  if (elem == "kiln::f16" || elem == "kiln::bf16") return 2;
  return 1;
}

// The widest vector (elements, a power of two of at most 16 bytes) that every one of
// `divisors` allows; 1 when none wider does.
int64_t vector_width(const std::string& elem, const std::vector<int64_t>& divisors) {
  for (int64_t n = 16 / elem_bytes(elem); n > 1; n /= 2)
    if (std::all_of(divisors.begin(), divisors.end(), [n](int64_t d) { return d % n == 0; }))
      return n;
  return 1;
}

std::string sum_code(const std::vector<Mono>& terms) {
  std::string s;
  for (const Mono& t : terms) {
    if (t.is_const(0)) continue;
    s += (s.empty() ? "" : " + ") + t.code();
  }
  return s.empty() ? "0LL" : s;
}

int64_t sum_divisor(const std::vector<Mono>& terms) {
  int64_t g = 0;
  for (const Mono& t : terms) g = std::gcd(g, t.divisor());
  return g;
}

// Work in items of `n` per element: the element count divided by the vector width.
ir::DimExpr work_of(const ir::DimExpr& numel, int64_t n) {
  return {numel.coef / n, numel.offset / n};
}

std::string vec_type(const std::string& elem, int64_t n) {
  return fmt::format("kiln::Vec<{}, {}>", elem, n);
}
std::string load(const std::string& elem, int64_t n, const std::string& ptr) {
  return fmt::format("kiln::load_vec<{}, {}>({})", elem, n, ptr);
}
std::string store(const std::string& elem, int64_t n, const std::string& ptr,
                  const std::string& v) {
  return fmt::format("kiln::store_vec<{}, {}>({}, {})", elem, n, ptr, v);
}

// Completes a grid-stride kernel over `numel` elements, `n` per work item (n > 1: vectorised):
// its body, work, path and launch geometry.
void finish_grid_stride(LayoutKernel& k, std::string body, const ir::DimExpr& numel, int64_t n,
                        const LayoutConfig& config) {
  k.def.body = std::move(body);
  k.work = work_of(numel, n);
  k.path = n > 1 ? fmt::format("vector{}", n) : "scalar";
  k.block = config.block;
  k.def.max_threads = config.block;
  k.work_per_block = config.block * config.items;
  k.config = fmt::format("block={} items={}", config.block, config.items);
}

struct Axis {
  Mono dim, stride;
};

// Drops unit axes and merges neighbours that are contiguous in the input, so a copy that only
// moves whole rows sees one long row.
std::vector<Axis> collapse(const StridedCopy& c) {
  std::vector<Axis> rev;  // innermost first
  for (size_t k = c.out_dims.size(); k-- > 0;) {
    if (c.out_dims[k].is_const(1)) continue;
    if (!rev.empty() && c.in_strides[k] == rev.back().stride.times(rev.back().dim)) {
      rev.back().dim = c.out_dims[k].times(rev.back().dim);
      continue;
    }
    rev.push_back({c.out_dims[k], c.in_strides[k]});
  }
  return {rev.rbegin(), rev.rend()};
}

// Coordinates c0.. of `i` over dims named d0..: innermost first; the outermost takes the rest.
std::string decompose(const std::string& var, size_t rank, const std::string& dim_prefix,
                      const std::string& indent) {
  if (rank == 0) return "";
  std::string s = indent + fmt::format("long long rem = {};\n", var);
  for (size_t k = rank; k-- > 1;)
    s += indent +
         fmt::format("const long long c{0} = rem % {1}{0}; rem /= {1}{0};\n", k, dim_prefix);
  s += indent + "const long long c0 = rem;\n";
  return s;
}

LayoutKernel strided_elements(const StridedCopy& c, const std::vector<Axis>& axes, int64_t n,
                              const ir::DimExpr& numel, const LayoutConfig& config) {
  LayoutKernel k;
  const size_t r = axes.size();
  std::string body;
  std::string count = "1LL";
  for (size_t a = 0; a < r; ++a) {
    const std::string d = a + 1 == r && n > 1 ? fmt::format("({}) / {}LL", axes[a].dim.code(), n)
                                              : axes[a].dim.code();
    body += fmt::format("  const long long d{} = {};\n", a, d);
    body += fmt::format("  const long long st{} = {};\n", a, axes[a].stride.code());
    count += fmt::format(" * d{}", a);
  }
  body += fmt::format("  const long long n = {};\n", count);
  body += fmt::format("  const long long base = {};\n", sum_code(c.base));
  body += kLoop;
  body += decompose("i", r, "d", "    ");
  std::string off = "base";
  for (size_t a = 0; a < r; ++a)
    off += a + 1 == r && n > 1 ? fmt::format(" + c{} * {}LL", a, n)
                               : fmt::format(" + c{0} * st{0}", a);
  if (n > 1) {
    body += "    " +
            store(c.elem, n, "out + i * " + std::to_string(n) + "LL",
                  load(c.elem, n, "in + (" + off + ")")) +
            ";\n";
  } else if (!c.out_elem.empty() && c.out_elem != c.elem) {
    body +=
        fmt::format("    out[i] = kiln::from_f32<{}>(kiln::to_f32(in[{}]));\n", c.out_elem, off);
  } else {
    body += fmt::format("    out[i] = in[{}];\n", off);
  }
  body += "  }\n";
  finish_grid_stride(k, std::move(body), numel, n, config);
  return k;
}

// Axis p (input-contiguous) and the last axis (output-contiguous) swap through a shared tile;
// every other axis is a batch of tiles. Blocks loop over tiles, so any grid is correct. A
// block is 32 x warps threads (kiln::layout_transpose_tile); the grid is sized for
// `config.items` tiles per block.
LayoutKernel strided_tiled(const StridedCopy& c, const std::vector<Axis>& axes, size_t p,
                           const ir::DimExpr& numel, const LayoutConfig& config) {
  LayoutKernel k;
  const uint32_t warps = config.block / 32;
  const size_t r = axes.size();
  std::string body = fmt::format("  __shared__ {} tile[32][33];\n", c.elem);
  for (size_t a = 0; a < r; ++a) {
    body += fmt::format("  const long long d{} = {};\n", a, axes[a].dim.code());
    body += fmt::format("  const long long st{} = {};\n", a, axes[a].stride.code());
  }
  // Output strides (the output is contiguous).
  body += fmt::format("  const long long os{} = 1LL;\n", r - 1);
  for (size_t a = r - 1; a-- > 0;)
    body += fmt::format("  const long long os{0} = os{1} * d{1};\n", a, a + 1);
  body += fmt::format("  const long long ta = (d{} + 31LL) / 32LL, tb = (d{} + 31LL) / 32LL;\n", p,
                      r - 1);
  std::string tiles = "ta * tb";
  for (size_t a = 0; a < r; ++a)
    if (a != p && a + 1 != r) tiles += fmt::format(" * d{}", a);
  body += fmt::format("  const long long tiles = {};\n", tiles);
  body += fmt::format("  const long long base = {};\n", sum_code(c.base));
  body += "  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {\n";
  body += "    long long rem = t;\n";
  body += "    const long long ja = rem % ta; rem /= ta;\n";
  body += "    const long long jb = rem % tb; rem /= tb;\n";
  body += "    long long ioff = base, ooff = 0;\n";
  for (size_t a = r - 1; a-- > 0;) {
    if (a == p) continue;
    body += fmt::format(
        "    {{ const long long q = rem % d{0}; rem /= d{0}; ioff += q * st{0}; ooff += q * "
        "os{0}; }}\n",
        a);
  }
  // 8 warps is the template's default (and the text of the default kernel).
  const std::string targs = warps == 8 ? c.elem : fmt::format("{}, {}", c.elem, warps);
  body += fmt::format(
      "    kiln::layout_transpose_tile<{}>(in + ioff, out + ooff, ja * 32LL, jb * 32LL, d{}, "
      "d{}, st{}, os{}, tile);\n",
      targs, p, r - 1, r - 1, p);
  body += "  }\n";
  k.def.body = std::move(body);
  k.def.max_threads = config.block;
  k.block = config.block;
  k.work = numel;
  k.work_per_block = 1024 * config.items;  // work is in elements: 1024 per tile
  k.config = fmt::format("threads=32x{} tiles={}", warps, config.items);
  k.path = "tiled";
  return k;
}

}  // namespace

Mono Mono::of(const ir::DimExpr& d) {
  Mono m;
  if (d.is_constant()) {
    m.c = d.offset;
  } else {
    m.f = {d};
  }
  return m;
}

Mono Mono::times(const Mono& o) const {
  Mono m;
  m.c = c * o.c;
  m.f = f;
  m.f.insert(m.f.end(), o.f.begin(), o.f.end());
  std::sort(m.f.begin(), m.f.end(), [](const ir::DimExpr& a, const ir::DimExpr& b) {
    return a.coef != b.coef ? a.coef < b.coef : a.offset < b.offset;
  });
  if (m.c == 0) m.f.clear();
  return m;
}

std::string Mono::code() const {
  if (f.empty()) return fmt::format("{}LL", c);
  std::string s = c == 1 ? "" : fmt::format("{}LL * ", c);
  for (size_t i = 0; i < f.size(); ++i) s += (i ? " * " : "") + dim_code(f[i]);
  return "(" + s + ")";
}

int64_t Mono::divisor() const {
  if (c == 0) return 0;
  int64_t d = c < 0 ? -c : c;
  for (const ir::DimExpr& x : f)
    d *= std::gcd(x.coef < 0 ? -x.coef : x.coef, x.offset < 0 ? -x.offset : x.offset);
  return d;
}

int64_t Mono::eval(int64_t s) const {
  int64_t v = c;
  for (const ir::DimExpr& x : f) v *= x.eval(s);
  return v;
}

Mono mono_numel(const ir::Shape& s, size_t from, size_t to) {
  Mono m;
  for (size_t i = from; i < std::min(to, s.size()); ++i) m = m.times(Mono::of(s[i]));
  return m;
}

std::vector<Mono> mono_strides(const ir::Shape& s) {
  std::vector<Mono> st(s.size());
  Mono run;
  for (size_t i = s.size(); i-- > 0;) {
    st[i] = run;
    run = run.times(Mono::of(s[i]));
  }
  return st;
}

LayoutKernel codegen_strided_copy(const StridedCopy& c, const ir::DimExpr& numel,
                                  const LayoutConfig& config) {
  const std::vector<Axis> axes = collapse(c);
  const size_t r = axes.size();
  LayoutKernel k;
  const bool converts = !c.out_elem.empty() && c.out_elem != c.elem;
  if (converts) {
    k = strided_elements(c, axes, 1, numel, config);
  } else if (r > 0 && axes.back().stride.is_const(1)) {
    std::vector<int64_t> divs = {axes.back().dim.divisor(), sum_divisor(c.base)};
    for (size_t a = 0; a + 1 < r; ++a) divs.push_back(axes[a].stride.divisor());
    k = strided_elements(c, axes, vector_width(c.elem, divs), numel, config);
  } else {
    // The innermost input axis moved: transpose through shared memory when both sides of the
    // tile are long enough to fill it (judged at S = 64), element by element otherwise.
    size_t p = r;
    for (size_t a = 0; a + 1 < r; ++a)
      if (axes[a].stride.is_const(1)) p = a;
    if (p < r && axes[p].dim.eval(64) >= 16 && axes.back().dim.eval(64) >= 16) {
      k = strided_tiled(c, axes, p, numel, config);
    } else {
      k = strided_elements(c, axes, 1, numel, config);
    }
  }
  k.def.params = {fmt::format("const {}* __restrict__ in", c.elem),
                  fmt::format("{}* __restrict__ out", converts ? c.out_elem : c.elem)};
  return k;
}

LayoutKernel codegen_chunk_copy(const ChunkCopy& c, const ir::DimExpr& numel,
                                const LayoutConfig& config) {
  LayoutKernel k;
  const size_t m = c.lens.size();
  std::vector<int64_t> divs;
  for (const Mono& l : c.lens) divs.push_back(l.divisor());
  const int64_t n = vector_width(c.elem, divs);
  std::string body = fmt::format("  const long long outer = {};\n", c.outer.code());
  for (size_t j = 0; j < m; ++j)
    body += fmt::format("  const long long L{} = {};\n", j, c.lens[j].code());
  body += "  const long long E0 = 0LL;\n";
  for (size_t j = 0; j < m; ++j)
    body += fmt::format("  const long long E{} = E{} + L{};\n", j + 1, j, j);
  body += fmt::format("  const long long tv = E{} / {}LL;\n", m, n);
  body += "  const long long n = outer * tv;\n";
  body += kLoop;
  body += fmt::format("    const long long o = i / tv, c = (i - o * tv) * {}LL;\n", n);
  const std::string vt = vec_type(c.elem, n);
  const std::string flat = fmt::format("{} + i * {}LL", c.split ? "in" : "out", n);
  if (c.split)
    body += fmt::format("    const {} v = {};\n", vt, load(c.elem, n, flat));
  else
    body += fmt::format("    {} v;\n", vt);
  for (size_t j = 0; j < m; ++j) {
    const std::string cond = j + 1 == m ? "" : fmt::format("if (c < E{}) ", j + 1);
    const std::string piece =
        fmt::format("{}{} + o * L{} + (c - E{})", c.split ? "out" : "in", j, j, j);
    const std::string action =
        c.split ? store(c.elem, n, piece, "v") : "v = " + load(c.elem, n, piece);
    body += fmt::format("    {}{}{{ {}; }}\n", j == 0 ? "" : "else ", cond, action);
  }
  if (!c.split) body += "    " + store(c.elem, n, flat, "v") + ";\n";
  body += "  }\n";
  for (size_t j = 0; j < m; ++j)
    k.def.params.push_back(c.split ? fmt::format("{}* __restrict__ out{}", c.elem, j)
                                   : fmt::format("const {}* __restrict__ in{}", c.elem, j));
  if (c.split) {
    k.def.params.insert(k.def.params.begin(), fmt::format("const {}* __restrict__ in", c.elem));
  } else {
    k.def.params.push_back(fmt::format("{}* __restrict__ out", c.elem));
  }
  finish_grid_stride(k, std::move(body), numel, n, config);
  return k;
}

LayoutKernel codegen_gather_rows(const GatherRows& g, const ir::DimExpr& numel,
                                 const LayoutConfig& config) {
  LayoutKernel k;
  const int64_t n = vector_width(g.elem, {g.inner.divisor()});
  std::string body;
  body += fmt::format("  const long long outer = {}, len = {}, inner = {}, nidx = {};\n",
                      g.outer.code(), g.len.code(), g.inner.code(), g.nidx.code());
  body += "  if (len <= 0) return;\n";
  body += fmt::format("  const long long vr = inner / {}LL;\n", n);
  body += "  const long long n = outer * nidx * vr;\n";
  body += kLoop;
  body += fmt::format("    const long long r = i / vr, col = (i - r * vr) * {}LL;\n", n);
  body += "    const long long o = r / nidx, j = r - o * nidx;\n";
  body += "    const long long k = kiln::layout_index(static_cast<long long>(idx[j]), len);\n";
  body += "    " +
          store(g.elem, n, fmt::format("out + i * {}LL", n),
                load(g.elem, n, "data + (o * len + k) * inner + col")) +
          ";\n";
  body += "  }\n";
  k.def.params = {fmt::format("const {}* __restrict__ data", g.elem),
                  fmt::format("const {}* __restrict__ idx", g.index_elem),
                  fmt::format("{}* __restrict__ out", g.elem)};
  finish_grid_stride(k, std::move(body), numel, n, config);
  return k;
}

LayoutKernel codegen_gather_nd(const GatherNd& g, const ir::DimExpr& numel,
                               const LayoutConfig& config) {
  LayoutKernel k;
  const int64_t n = vector_width(g.elem, {g.inner.divisor()});
  const size_t tuple = g.lens.size();
  std::string body = fmt::format("  const long long inner = {}, nidx = {};\n", g.inner.code(),
                                 g.nidx.code());
  std::string off;
  for (size_t m = 0; m < tuple; ++m) {
    body += fmt::format("  const long long d{} = {}, st{} = {};\n", m, dim_code(g.lens[m]), m,
                        g.strides[m].code());
    body += fmt::format("  if (d{} <= 0) return;\n", m);
    off += fmt::format(
        "{}kiln::layout_index(static_cast<long long>(idx[j * {}LL + {}]), d{}) * st{}",
        m ? "\n        + " : "", tuple, m, m, m);
  }
  body += fmt::format("  const long long vr = inner / {}LL;\n", n);
  body += "  const long long n = nidx * vr;\n";
  body += kLoop;
  body += fmt::format("    const long long j = i / vr, col = (i - j * vr) * {}LL;\n", n);
  body += fmt::format("    const long long at = {};\n", off);
  body += "    " +
          store(g.elem, n, fmt::format("out + i * {}LL", n), load(g.elem, n, "data + at + col")) +
          ";\n";
  body += "  }\n";
  k.def.params = {fmt::format("const {}* __restrict__ data", g.elem),
                  fmt::format("const {}* __restrict__ idx", g.index_elem),
                  fmt::format("{}* __restrict__ out", g.elem)};
  finish_grid_stride(k, std::move(body), numel, n, config);
  return k;
}

LayoutKernel codegen_gather_elements(const GatherElements& g, const ir::DimExpr& numel,
                                     const LayoutConfig& config) {
  LayoutKernel k;
  const size_t r = g.idx_shape.size();
  std::string body;
  std::string count = "1LL";
  for (size_t a = 0; a < r; ++a) {
    body += fmt::format("  const long long d{} = {};\n", a, dim_code(g.idx_shape[a]));
    body += fmt::format("  const long long st{} = {};\n", a, g.data_strides[a].code());
    count += fmt::format(" * d{}", a);
  }
  body += fmt::format("  const long long n = {};\n", count);
  body += fmt::format("  const long long alen = {};\n", dim_code(g.axis_len));
  body += "  if (alen <= 0) return;\n";
  body += kLoop;
  body += decompose("i", r, "d", "    ");
  std::string off;
  for (size_t a = 0; a < r; ++a) {
    const std::string coord = a == g.axis
                                  ? "kiln::layout_index(static_cast<long long>(idx[i]), alen)"
                                  : fmt::format("c{}", a);
    off += fmt::format("{}{} * st{}", a ? " + " : "", coord, a);
  }
  body += fmt::format("    out[i] = data[{}];\n", off.empty() ? "0" : off);
  body += "  }\n";
  k.def.params = {fmt::format("const {}* __restrict__ data", g.elem),
                  fmt::format("const {}* __restrict__ idx", g.index_elem),
                  fmt::format("{}* __restrict__ out", g.elem)};
  finish_grid_stride(k, std::move(body), numel, 1, config);
  return k;
}

LayoutKernel codegen_range(const RangeFill& r, const ir::DimExpr& numel) {
  LayoutKernel k;
  std::string body = fmt::format("  const long long n = {};\n", dim_code(numel));
  body += kLoop;
  if (r.is_float) {
    // Exact decimal forms of the doubles: the reference computes start + i·delta in double too.
    body += fmt::format(
        "    const double v = {:.17g} + static_cast<double>(i) * {:.17g};\n"
        "    out[i] = kiln::from_f32<{}>(static_cast<float>(v));\n",
        r.fstart, r.fdelta, r.elem);
  } else {
    body += fmt::format("    out[i] = static_cast<{}>({} + i * {}LL);\n", r.elem, dim_code(r.start),
                        r.delta);
  }
  body += "  }\n";
  k.def.params = {fmt::format("{}* __restrict__ out", r.elem)};
  finish_grid_stride(k, std::move(body), numel, 1, {});
  return k;
}

namespace {

// How codegen_rotary splits a row: units of `pairs` rotary pairs, then units of `run` elements
// past the rotary dims; `l`, `lc` and `lt` are the vector widths of the row, table and tail
// reads and writes (each divides every offset it is added to, so a vector never straddles an
// alignment boundary: buffers are 256-byte aligned).
struct RotaryUnits {
  int64_t pairs = 1, l = 1, lc = 1, run = 1, lt = 1;
  int64_t rotary_units = 0, tail_units = 0;
  int64_t per_row() const { return rotary_units + tail_units; }
};

// The divisors a part's row offsets bring: its offset and strides (both terms of each), or the
// row length D when X is contiguous.
void row_divisors(const RotaryKernel& r, const RotaryKernel::Part& part,
                  std::vector<int64_t>& out) {
  if (part.x_lead_strides.empty()) {
    out.push_back(r.d);
    return;
  }
  for (const ir::DimExpr& e : part.x_lead_strides) out.insert(out.end(), {e.coef, e.offset});
  out.insert(out.end(), {part.x_offset.coef, part.x_offset.offset});
}

RotaryUnits rotary_units(const RotaryKernel& r) {
  RotaryUnits u;
  const int64_t half = r.rotary_dim / 2, tail = r.d - r.rotary_dim;
  const bool full = r.table_width == r.rotary_dim;
  std::vector<int64_t> rows = {r.d};  // the output rows are contiguous
  row_divisors(r, r.x, rows);
  if (r.second) row_divisors(r, *r.second, rows);
  // Pairs a unit: up to a 16-byte vector of X's elements, dividing the pairs of a row.
  u.pairs = vector_width(r.elem, {half});
  std::vector<int64_t> xd = rows;
  xd.push_back(r.interleaved ? 2 * u.pairs : u.pairs);
  if (!r.interleaved) xd.push_back(half);
  u.l = vector_width(r.elem, xd);
  std::vector<int64_t> td = {u.pairs, r.table_width};
  if (full) td.push_back(half);
  u.lc = vector_width(r.table_elem, td);
  u.rotary_units = half / u.pairs;
  if (tail > 0) {
    u.run = vector_width(r.elem, {tail, r.rotary_dim});
    std::vector<int64_t> rd = rows;
    rd.insert(rd.end(), {u.run, r.rotary_dim});
    u.lt = vector_width(r.elem, rd);
    u.tail_units = tail / u.run;
  }
  return u;
}

// The statements of one unit of work inside the grid-stride loop, for unit `ii`: the row's
// coordinates over its leading dims (named `dp`0..), the table row, X's row and the unit.
std::string rotary_unit(const RotaryKernel& r, const RotaryUnits& u, const RotaryKernel::Part& part,
                        const std::string& dp, const std::string& out) {
  const size_t xr = part.x_lead.size(), tr = r.table_lead.size();
  // Row of the table for row `row` of X: the table's leading dims broadcast (size 1) or match.
  std::string trow;
  const bool same = r.table_lead == part.x_lead;
  if (!same) {
    const std::vector<Mono> tst = mono_strides(r.table_lead);
    for (size_t j = 0; j < tr; ++j) {
      if (r.table_lead[j] == ir::DimExpr::constant(1)) continue;
      const size_t a = xr - tr + j;
      trow += fmt::format("{}c{} * {}", trow.empty() ? "" : " + ", a, tst[j].code());
    }
  }
  const bool view = !part.x_lead_strides.empty();
  std::string body = "    const long long row = ii / U, k = ii - row * U;\n";
  if (!same || view) body += decompose("row", xr, dp, "    ");
  body += fmt::format("    const long long trow = {};\n", same           ? "row"
                                                          : trow.empty() ? "0LL"
                                                                         : trow);
  std::string xrow = "row * D";
  if (view) {  // X's row inside the viewed buffer
    xrow = fmt::format("({})", dim_code(part.x_offset));
    for (size_t a = 0; a < xr; ++a)
      xrow += fmt::format(" + c{} * ({})", a, dim_code(part.x_lead_strides[a]));
  }
  body += fmt::format("    const long long xrow = {};\n", xrow);
  const int mode = r.interleaved ? 1 : r.table_width == r.rotary_dim ? 2 : 0;
  const std::string pairs = fmt::format(
      "kiln::layout_rotary_pairs<{}, {}, {}, {}, {}, {}>(x + xrow, cos_t + trow * W, "
      "sin_t + trow * W, {} + row * D, k * {}LL, R / 2);",
      r.elem, r.table_elem, u.pairs, u.l, u.lc, mode, out, u.pairs);
  if (u.tail_units == 0) return body + "    " + pairs + "\n";
  body += "    if (k < P) {\n      " + pairs + "\n    } else {\n";
  body += fmt::format(
      "      const long long j = R + (k - P) * {0}LL;\n"
      "      kiln::layout_copy_run<{1}, {0}, {2}>(x + xrow + j, {3} + row * D + j);\n    }}\n",
      u.run, r.elem, u.lt, out);
  return body;
}

}  // namespace

// Each thread takes units of a row: `pairs` rotary pairs (each element of a pair is computed as
// layout_rotary does), or a run of the elements past the rotary dims, copied. Row reads and
// writes are vectors wherever the offsets allow (rotary_units).
LayoutKernel codegen_rotary(const RotaryKernel& r, const ir::DimExpr& numel,
                            const LayoutConfig& config) {
  LayoutKernel k;
  const RotaryUnits u = rotary_units(r);
  std::vector<const RotaryKernel::Part*> parts = {&r.x};
  if (r.second) parts.push_back(&*r.second);
  const std::vector<std::string> dps = {"d", "e"};
  std::string body =
      fmt::format("  const long long D = {}LL, R = {}LL, W = {}LL, U = {}LL, P = {}LL;\n", r.d,
                  r.rotary_dim, r.table_width, u.per_row(), u.rotary_units);
  for (size_t p = 0; p < parts.size(); ++p) {
    std::string rows = "1LL";
    for (size_t a = 0; a < parts[p]->x_lead.size(); ++a) {
      body +=
          fmt::format("  const long long {}{} = {};\n", dps[p], a, dim_code(parts[p]->x_lead[a]));
      rows += fmt::format(" * {}{}", dps[p], a);
    }
    body += fmt::format("  const long long n{} = {} * U;\n", p, rows);
  }
  body += parts.size() == 1 ? "  const long long n = n0;\n" : "  const long long n = n0 + n1;\n";
  body += kLoop;
  if (parts.size() == 1) {
    body += "    const long long ii = i;\n" + rotary_unit(r, u, r.x, dps[0], "out");
  } else {
    body += "   if (i < n0) {\n    const long long ii = i;\n" +
            rotary_unit(r, u, r.x, dps[0], "out") +
            "   } else {\n    const long long ii = i - n0;\n" +
            rotary_unit(r, u, *r.second, dps[1], "out2") + "   }\n";
  }
  body += "  }\n";
  k.def.params = {fmt::format("const {}* __restrict__ x", r.elem),
                  fmt::format("const {}* __restrict__ cos_t", r.table_elem),
                  fmt::format("const {}* __restrict__ sin_t", r.table_elem),
                  fmt::format("{}* __restrict__ out", r.elem)};
  if (r.second) k.def.params.push_back(fmt::format("{}* __restrict__ out2", r.elem));
  finish_grid_stride(k, std::move(body), numel, 1, config);
  // One work item a unit: numel is rows * D.
  k.work = {numel.coef / r.d * u.per_row(), numel.offset / r.d * u.per_row()};
  k.path = fmt::format("pairs{}", u.pairs);
  return k;
}

std::vector<LaunchCandidate> layout_candidates(const LayoutCodegen& gen) {
  const LayoutKernel def = gen({});
  std::vector<LayoutConfig> configs;
  if (def.path == "tiled") {
    configs = {{128, 1}, {512, 1}, {1024, 1}};
  } else {
    // Items of the default when the work is a constant (0: it depends on S).
    const int64_t steps = def.work.coef == 0 ? def.work.offset : 0;
    for (LayoutConfig c : {LayoutConfig{128, 1}, {512, 1}, {1024, 1}, {256, 4}}) {
      if (steps > 0) {
        const bool same_blocks = c.items == 1 && steps <= std::min(c.block, def.block);
        const bool mostly_idle = c.block > def.block && 2 * steps <= c.block;
        const bool one_block = c.items > 1 && steps <= c.block;
        if (same_blocks || mostly_idle || one_block) continue;
      }
      configs.push_back(c);
    }
  }
  std::vector<LaunchCandidate> out;
  for (const LayoutConfig& c : configs) {
    LayoutKernel k = gen(c);
    LaunchCandidate cand;
    cand.config = std::move(k.config);
    cand.def = std::move(k.def);
    cand.work = k.work;
    cand.work_per_block = k.work_per_block;
    cand.block = k.block;
    out.push_back(std::move(cand));
  }
  return out;
}

}  // namespace kiln::compiler
