#include "compiler/backend/lower/skinny_gemm_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/backend/kernel_codegen.h"

namespace kiln::compiler {
namespace {

// Measured on an H200 (decode shapes of GPT-2 and a 0.85B Llama, M = 1 to 16): a lane holding
// about four 16-byte vectors of a row, every one in flight at once, reads W fastest; fewer leave
// latency exposed, more leave too few warps. Past 16k warps more groups only add waves.
constexpr int64_t kLaneVectors = 4;
constexpr int64_t kMostWarps = 16384;
// Weight vectors a lane may hold at once (registers: 4 per 16-byte vector).
constexpr int kMostHeld = 16;

int64_t vectors_per_row(const SkinnyGemm& s, int vec) { return s.k / vec; }
int64_t lane_iters(const SkinnyGemm& s, int vec, int ksplit) {
  const int64_t stride = 32 * static_cast<int64_t>(ksplit);
  return (vectors_per_row(s, vec) + stride - 1) / stride;
}

// The widest split (at most 16) that leaves each lane kLaneVectors vectors of a row and the grid
// at most kMostWarps warps.
int default_ksplit(const SkinnyGemm& s, int vec, int rows) {
  const int64_t groups = (s.n + rows - 1) / rows;
  int ksplit = 1;
  while (ksplit < 16 && lane_iters(s, vec, ksplit * 2) >= kLaneVectors &&
         groups * ksplit * 2 <= kMostWarps)
    ksplit *= 2;
  return ksplit;
}

// The tensor-core form: warp steps of 64 along K over tiles of 16 rows of W. Measured on an H100
// (the same shapes, M = 1 to 16): about three steps a warp is fastest.
constexpr int64_t kMmaStepsPerWarp = 3;
constexpr int kMmaMostChunk = 4;
// The fewest rows the lowering gives the tensor-core form (skinny_rows_geometry), by the kernel a
// size runs. The general kernel carries the registers of every pass size (the Llama gate/up's:
// 93 against 56-60 in entries specialised for 1 or 2 rows), and its CUDA-core form falls behind
// from 3 rows. Decode steps on an H200 (fp16, 512 tokens of context, ms, one run each), general
// kernels, CUDA-core form against tensor-core form at batch 2 / 4: GPT-2 small 0.383-0.403
// against 0.442 / 0.548-0.558 against 0.478, the 0.85B Llama 1.003-1.024 against 1.005 /
// 1.479-1.480 against 1.058.
constexpr int64_t kMmaLeastRows = 3;
// At a size with an entry specialised for it (compile_sizes), the CUDA-core form up to 4 rows:
// the same decode steps at batch 4 with compile sizes = capture sizes, CUDA-core form against
// tensor-core form: GPT-2 0.402 against 0.449, the Llama 1.012 against 1.066.
constexpr int64_t kMmaLeastRowsSpecialised = 5;

int64_t mma_steps(const SkinnyGemm& s) { return (s.k + 63) / 64; }

bool mma_form(const SkinnyGemm& s) {
  return (s.dtype == DType::kF16 || s.dtype == DType::kBF16) && s.max_m >= 2 && s.k % 8 == 0;
}

// Adds the tensor-core form to `g` (its K split and steps in flight); the block's warps serve
// both forms. Returns g unchanged when the CUDA-core grid would not cover the tensor-core
// form's blocks (the kernel's static_assert).
SkinnyGeometry with_mma(const SkinnyGemm& s, SkinnyGeometry g, int mma_ksplit, int chunk) {
  const int warps = std::max(g.warps, mma_ksplit);
  if ((warps / g.ksplit) * g.rows > 16 * (warps / mma_ksplit)) return g;
  g.warps = warps;
  g.mma_ksplit = mma_ksplit;
  const int64_t per_warp = (mma_steps(s) + mma_ksplit - 1) / mma_ksplit;
  g.mma_chunk = static_cast<int>(std::clamp<int64_t>(per_warp, 1, chunk));
  return g;
}

// Many tiles and a long K (the Llama's gate/up: 704 tiles of 32 steps; its LM head: 2000):
// two K-splits, so each warp's window rolls over its steps with the activations loaded beside
// the weights (kernels/skinny_gemm_mma.cuh, kAWin). H200, M = 8 (kernels_bench_skinny_gemm):
// the gate/up 15.4 µs against 20.1 with 8 splits; the LM head 38.3 against 42.3.
constexpr int64_t kMmaManyTiles = 512;
constexpr int64_t kMmaLongSteps = 16;

int mma_default_ksplit(const SkinnyGemm& s) {
  const int64_t tiles = (s.n + 15) / 16;
  if (tiles >= kMmaManyTiles && mma_steps(s) >= kMmaLongSteps) return 2;
  int ksplit = 1;
  while (ksplit < 16 && (mma_steps(s) + 2 * ksplit - 1) / (2 * ksplit) >= kMmaStepsPerWarp &&
         tiles * ksplit * 2 <= kMostWarps)
    ksplit *= 2;
  return ksplit;
}

SkinnyGeometry make(const SkinnyGemm& s, int vec, int rows, int ksplit, int warps) {
  SkinnyGeometry g;
  g.vec = vec;
  g.rows = rows;
  g.ksplit = ksplit;
  g.warps = std::max(warps, ksplit);
  g.chunk = static_cast<int>(std::clamp<int64_t>(lane_iters(s, vec, ksplit), 1, kMostHeld / rows));
  return g;
}

// `core` (a CUDA-core geometry) with the default tensor-core form added where the GEMM takes it.
SkinnyGeometry with_default_mma(const SkinnyGemm& s, const SkinnyGeometry& core) {
  return mma_form(s) ? with_mma(s, core, mma_default_ksplit(s), kMmaMostChunk) : core;
}

// kernels/skinny_gemm.cuh's SkinnyAct.
int gate_code(GateAct a) {
  switch (a) {
    case GateAct::kRelu:
      return 1;
    case GateAct::kGeluTanh:
      return 2;
    case GateAct::kSilu:
      return 3;
    case GateAct::kGelu:
      return 4;
    case GateAct::kNone:
      break;
  }
  return 0;
}

int act_code(const SkinnyGemm& s) {
  if (s.gate != GateAct::kNone) return gate_code(s.gate);
  if (s.epilogue == Epilogue::kRelu || s.epilogue == Epilogue::kBiasRelu) return 1;
  if (s.epilogue == Epilogue::kGelu || s.epilogue == Epilogue::kBiasGelu) return 2;
  return 0;
}

bool gated(const SkinnyGemm& s) { return s.gate != GateAct::kNone; }

bool has_bias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kBiasRelu || e == Epilogue::kBiasGelu;
}

}  // namespace

SkinnyGeometry skinny_geometry(const SkinnyGemm& s) {
  const int64_t size = static_cast<int64_t>(std::max<size_t>(1, dtype_size(s.dtype)));
  int vec = 1;
  for (int64_t n = 16 / size; n >= 1; n /= 2)
    if (s.k % n == 0) {
      vec = static_cast<int>(n);
      break;
    }
  // A short K leaves a lane under kLaneVectors vectors of a row: give it a second row. A gated
  // GEMM's group owns (gate, up) pairs.
  const int rows = gated(s) || (lane_iters(s, vec, 1) < kLaneVectors && s.n >= 2048) ? 2 : 1;
  return make(s, vec, rows, default_ksplit(s, vec, rows), 4);
}

std::optional<SkinnyGeometry> skinny_rows_geometry(const SkinnyGemm& s) {
  const SkinnyGeometry g = with_default_mma(s, skinny_geometry(s));
  if (g.mma_ksplit == 0) return std::nullopt;
  return g;
}

std::vector<SkinnyGeometry> skinny_candidate_geometries(const SkinnyGemm& s) {
  const SkinnyGeometry d = skinny_geometry(s);
  const std::optional<SkinnyGeometry> rows = skinny_rows_geometry(s);
  // The lowering's choice at larger M first; then another split of K or of rows for the
  // CUDA-core form, more warps; another split of K or more steps in flight for the tensor-core
  // form.
  const int other_rows = gated(s) ? 2 * d.rows : d.rows == 1 ? 2 : 1;
  std::vector<SkinnyGeometry> wanted;
  if (rows) wanted.push_back(*rows);
  for (const SkinnyGeometry& core :
       {make(s, d.vec, d.rows, d.ksplit * 2, 4),
        make(s, d.vec, d.rows, std::max(1, d.ksplit / 2), 4),
        make(s, d.vec, other_rows, d.ksplit, 4), make(s, d.vec, d.rows, d.ksplit, 8),
        make(s, d.vec, other_rows, std::max(1, d.ksplit / 2), 4)})
    wanted.push_back(with_default_mma(s, core));
  if (rows) {
    const SkinnyGeometry core = make(s, d.vec, d.rows, d.ksplit, 4);
    wanted.push_back(with_mma(s, core, rows->mma_ksplit * 2, kMmaMostChunk));
    wanted.push_back(with_mma(s, core, std::max(1, rows->mma_ksplit / 2), kMmaMostChunk));
    wanted.push_back(with_mma(s, core, rows->mma_ksplit, 2 * kMmaMostChunk));
  }
  std::vector<SkinnyGeometry> out;
  for (const SkinnyGeometry& g : wanted) {
    if (g == d || g.ksplit > 16 || g.mma_ksplit > 16 ||
        std::find(out.begin(), out.end(), g) != out.end())
      continue;
    out.push_back(g);
  }
  return out;
}

std::string skinny_geometry_label(const SkinnyGeometry& geo) {
  std::string label = fmt::format("rows={} ksplit={} warps={} vec={} chunk={}", geo.rows,
                                  geo.ksplit, geo.warps, geo.vec, geo.chunk);
  if (geo.mma_ksplit > 0)
    label += fmt::format(" mma_ksplit={} mma_chunk={}", geo.mma_ksplit, geo.mma_chunk);
  return label;
}

KernelDef codegen_skinny_gemm(const SkinnyGemm& s, const SkinnyGeometry& geo) {
  const std::string t(kernel_ctype(s.dtype));
  const bool bias = has_bias(s.epilogue);
  KernelDef def;
  def.params.push_back(fmt::format("const {}* a", t));
  def.params.push_back(fmt::format("const {}* __restrict__ w", t));
  const bool norm = s.norm != NormPrologue::kNone;
  const bool norm_bias = s.norm == NormPrologue::kLayerBias;
  if (norm) def.params.push_back(fmt::format("const {}* norm_scale", t));
  if (norm_bias) def.params.push_back(fmt::format("const {}* norm_bias", t));
  if (bias) def.params.push_back(fmt::format("const {}* bias", t));
  if (s.has_c) def.params.push_back(fmt::format("const {}* c", t));
  def.params.push_back(fmt::format("{}* d", t));
  def.params.push_back("float alpha");
  def.params.push_back("float beta");
  // The template arguments after the geometry, and the call's arguments (a kernel without a
  // norm prologue keeps the text it had before there was one).
  const std::string norm_arg =
      norm ? fmt::format(", kiln::SkinnyNorm<{}>{{norm_scale, {}, float({:.9g})}}", t,
                         norm_bias ? "norm_bias" : "nullptr", s.norm_epsilon)
           : "";
  const std::string tail = fmt::format(
      "{}, {}, {}, {}, {}{}>(a, w, {}, {}, d, {}, alpha, beta{});\n", s.max_m, act_code(s), bias,
      s.has_c, gated(s), norm ? fmt::format(", {}", static_cast<int>(s.norm)) : "",
      bias ? "bias" : "nullptr", s.has_c ? "c" : "nullptr", dim_code(s.m), norm_arg);
  if (geo.mma_ksplit > 0)
    def.body = fmt::format("  kiln::skinny_gemm_dual<{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}", t,
                           s.k, s.n, geo.vec, geo.rows, geo.ksplit, geo.chunk, geo.mma_ksplit,
                           geo.mma_chunk, geo.warps, tail);
  else
    def.body = fmt::format("  kiln::skinny_gemm<{}, {}, {}, {}, {}, {}, {}, {}, {}", t, s.k, s.n,
                           geo.vec, geo.rows, geo.ksplit, geo.warps, geo.chunk, tail);
  def.max_threads = static_cast<uint32_t>(32 * geo.warps);
  def.enters_itself = true;  // after the first weight loads (kernels/skinny_gemm.cuh)
  return def;
}

KernelDef codegen_gated_pairs(DType dtype, GateAct act, const ir::DimExpr& outputs, int vec,
                              uint32_t block) {
  const std::string t(kernel_ctype(dtype));
  KernelDef def;
  def.params = {fmt::format("const {}* __restrict__ t", t), fmt::format("{}* __restrict__ out", t)};
  const std::string v = vec > 1 ? fmt::format(", {}", vec) : "";
  def.body = fmt::format("  kiln::gated_pairs<{}, {}{}>(t, out, {});\n", t, gate_code(act), v,
                         dim_code(outputs));
  def.max_threads = block;
  return def;
}

int gated_pairs_vec(DType dtype, int64_t n) {
  const int64_t size = std::max<int64_t>(1, static_cast<int64_t>(dtype_size(dtype)));
  for (int64_t vec = 16 / (2 * size); vec > 1; vec /= 2)
    if (n % vec == 0) return static_cast<int>(vec);
  return 1;
}

namespace {

// Padded sizes among the planned ones where M is in [1, the configured maximum there].
std::vector<int64_t> small_m_sizes(const LowerContext& cx, const ir::DimExpr& m) {
  std::vector<int64_t> out;
  for (int64_t p : cx.planned_sizes()) {
    const int64_t rows = m.eval(p);
    if (rows >= 1 && rows <= std::min(cx.skinny_max_m_at(p), kSkinnyMaxM)) out.push_back(p);
  }
  return out;
}

// A new constant holding `b` ([K, N] row-major, a constant) transposed to [N, K].
int transposed_weight(LowerContext& cx, int b, int64_t k, int64_t n) {
  const ir::Value& val = cx.value(b);
  const size_t elem = dtype_size(val.dtype);
  ir::Constant t;
  t.dims = {n, k};
  t.bytes.resize(val.constant->bytes.size());
  const uint8_t* src = val.constant->bytes.data();
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < n; ++c)
      std::copy_n(src + (r * n + c) * elem, elem, t.bytes.data() + (c * k + r) * elem);
  return cx.new_value(val.name + "/nk", val.dtype,
                      {ir::DimExpr::constant(n), ir::DimExpr::constant(k)}, std::move(t));
}

// The GEMM's B as an [N, K] tensor: B itself with trans_b, a transposed copy of a [K, N]
// constant only this node reads, else -1. B must be a constant: the kernel reads its first
// weights before waiting for the kernel before it (programmatic dependent launch), so a B that
// kernel writes would be read too early.
int weight_nk(LowerContext& cx, int node, const GemmLaunch& gemm, int64_t k, int64_t n) {
  const ir::Value& b = cx.value(gemm.b);
  const auto numel = ir::shape_numel(b.shape);
  if (!numel || !numel->is_constant() || numel->offset != k * n) return -1;
  if (!cx.is_constant(gemm.b)) return -1;
  const int64_t elems = numel->offset;
  if (gemm.trans_b) return gemm.b;
  // The node's own weight when nothing else reads it, or a copy the lowering made for this GEMM
  // (lower_gemm.cc's zero-padded weight), which no node reads.
  const int original = cx.node(node).inputs[1];
  const bool sole_reader =
      gemm.b == original ? cx.consumers(gemm.b).size() == 1 : cx.consumers(gemm.b).empty();
  if (!b.constant || !sole_reader || cx.is_graph_output(gemm.b) ||
      b.constant->bytes.size() != static_cast<size_t>(elems) * dtype_size(b.dtype))
    return -1;
  return transposed_weight(cx, gemm.b, k, n);
}

// The planned sizes where a skinny kernel computes `gemm`, with gemm.b turned into [N, K]; empty
// (and gemm unchanged) when the GEMM's shape or dtype does not allow one.
std::vector<int64_t> skinny_sizes_of(LowerContext& cx, int node, GemmLaunch& gemm) {
  if (gemm.batch != ir::DimExpr::constant(1) || gemm.trans_a || !gemm.k.is_constant() ||
      !gemm.n.is_constant())
    return {};
  const DType dt = cx.dtype(gemm.a);
  if (dt != DType::kF32 && dt != DType::kF16 && dt != DType::kBF16) return {};
  const int64_t k = gemm.k.offset, n = gemm.n.offset;
  if (k < 1 || n < 1) return {};
  std::vector<int64_t> sizes = small_m_sizes(cx, gemm.m);
  if (sizes.empty()) return {};
  const int w = weight_nk(cx, node, gemm, k, n);
  if (w < 0) return {};
  gemm.b = w;
  gemm.trans_b = true;
  return sizes;
}

// The gated kernel launch computing `s` into `d` at `sizes` (with `norm` applied to A's rows
// first when given); sets gemm.skinny_sizes.
SkinnyLaunch skinny_launch(LowerContext& cx, GemmLaunch& gemm, SkinnyGemm s, int d,
                           std::vector<int64_t> sizes, const SkinnyNorm* norm) {
  s.dtype = cx.dtype(gemm.a);
  s.k = gemm.k.offset;
  s.n = gemm.n.offset;
  s.m = gemm.m;
  // Rows per pass from the configured maximum, not from the sizes: the kernel's text (and so the
  // module) must not change with the capture sizes.
  while (s.max_m < std::min(cx.skinny_max_m(), kSkinnyMaxM)) s.max_m *= 2;
  if (norm != nullptr) {
    s.norm = norm->rms         ? NormPrologue::kRms
             : norm->bias >= 0 ? NormPrologue::kLayerBias
                               : NormPrologue::kLayer;
    s.norm_epsilon = norm->epsilon;
  }

  const SkinnyGeometry geo = skinny_geometry(s);
  KernelLaunch launch;
  launch.kernel = cx.add_kernel("kiln_skinny_gemm", codegen_skinny_gemm(s, geo));
  launch.args = {KernelArgRef::tensor(norm != nullptr ? norm->x : gemm.a),
                 KernelArgRef::tensor(gemm.b)};
  if (norm != nullptr) launch.args.push_back(KernelArgRef::tensor(norm->scale));
  if (norm != nullptr && norm->bias >= 0) launch.args.push_back(KernelArgRef::tensor(norm->bias));
  if (has_bias(s.epilogue)) launch.args.push_back(KernelArgRef::tensor(gemm.bias));
  if (s.has_c) launch.args.push_back(KernelArgRef::tensor(gemm.c));
  launch.args.push_back(KernelArgRef::tensor(d));
  launch.args.push_back(KernelArgRef::imm_f32(gemm.alpha));
  launch.args.push_back(KernelArgRef::imm_f32(gemm.beta));
  launch.args.push_back(KernelArgRef::size());
  auto place = [&](auto& l, const SkinnyGeometry& g) {
    l.work = gemm.n;
    l.work_per_block = static_cast<uint32_t>(g.warps / g.ksplit * g.rows);
    l.block = static_cast<uint32_t>(32 * g.warps);
  };
  place(launch, geo);
  launch.nodes = gemm.nodes + (norm != nullptr ? " (skinny, norm prologue)" : " (skinny)");
  launch.config = skinny_geometry_label(geo);
  for (const SkinnyGeometry& g : skinny_candidate_geometries(s)) {
    LaunchCandidate c;
    c.config = skinny_geometry_label(g);
    c.def = codegen_skinny_gemm(s, g);
    place(c, g);
    launch.candidates.push_back(std::move(c));
  }
  // From kMmaLeastRows rows (kMmaLeastRowsSpecialised at a compile size), the tensor-core form
  // (candidate 0) unless autotuning decides otherwise; fewer keep the default, whose block is
  // the CUDA-core form's alone.
  if (skinny_rows_geometry(s))
    for (int64_t p : sizes)
      if (s.m.eval(p) >= (cx.specialised(p) ? kMmaLeastRowsSpecialised : kMmaLeastRows))
        launch.tuned[p] = TunedChoice{0, "heuristic", 0, 0};
  launch.run_sizes = sizes;
  gemm.skinny_sizes = std::move(sizes);
  return {std::move(launch), norm != nullptr};
}

}  // namespace

std::optional<SkinnyLaunch> skinny_gemm_launch(LowerContext& cx, int node, GemmLaunch& gemm,
                                               const SkinnyNorm* norm) {
  std::vector<int64_t> sizes = skinny_sizes_of(cx, node, gemm);
  if (sizes.empty()) return std::nullopt;
  SkinnyGemm s;
  s.epilogue = gemm.epilogue;
  s.has_c = gemm.c >= 0;
  return skinny_launch(cx, gemm, s, gemm.d, std::move(sizes), norm);
}

std::optional<SkinnyLaunch> skinny_gemm_launch_gated(LowerContext& cx, int node, GemmLaunch& gemm,
                                                     GateAct act, int out, const SkinnyNorm* norm) {
  if (gemm.epilogue != Epilogue::kNone || gemm.c >= 0 || !gemm.n.is_constant() ||
      gemm.n.offset % 2 != 0)
    return std::nullopt;
  std::vector<int64_t> sizes = skinny_sizes_of(cx, node, gemm);
  if (sizes.empty()) return std::nullopt;
  SkinnyGemm s;
  s.gate = act;
  return skinny_launch(cx, gemm, s, out, std::move(sizes), norm);
}

}  // namespace kiln::compiler
