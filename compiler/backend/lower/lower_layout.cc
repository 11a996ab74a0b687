// Layout family: views, transposes, copies, gathers, rotary. Views (Reshape, Squeeze,
// Unsqueeze, Flatten) are aliases unless they make a graph output; everything else becomes one
// generated kernel (compiler/backend/lower/layout_codegen.h) with its launch-configuration
// candidates for the tuner (layout_candidates; Range has none).
//
// Padding safety: the runtime runs a request of size s padded to P, and the real rows of a
// tensor are a prefix of its size axis. A kernel that reads the input at an offset that depends
// on S (a Slice counted from the end of the size axis, a Concat or Split piece placed after a
// size-dependent one, a Gather of the size axis with negative indices, a Range that starts at S)
// would give real rows garbage, so those are refused with the reason. Gathers (Gather,
// GatherElements, GatherND) of the size axis with run-time indices are judged by
// compiler/passes/padding_taint.h before lowering.
#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_lowering.h"
#include "compiler/backend/lower/layout_codegen.h"
#include "compiler/backend/lower/lower_rules.h"
#include "compiler/ops/op_util.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

using ir::DimExpr;

Result<std::string> elem_type(const LowerContext& cx, const ir::Node& n, int v) {
  std::string_view t = kernel_ctype(cx.dtype(v));
  if (t.empty())
    return lower_unsupported(n, fmt::format("tensor '{}' is {}; layout kernels move f32, f16, bf16 "
                                            "and integer/bool data",
                                            cx.value(v).name, dtype_name(cx.dtype(v))));
  return std::string(t);
}

// A tensor a kernel can read: not a symbolic constant (whose contents exist only as dims).
Status check_readable(const LowerContext& cx, const ir::Node& n, int v) {
  const ir::Value& val = cx.value(v);
  if (val.producer < 0 && val.ints && !val.constant)
    return lower_unsupported(
        n, fmt::format("input '{}' is a symbolic shape value, not a tensor", val.name));
  return Status::ok_status();
}

Result<DimExpr> numel_of(const ir::Node& n, const ir::Shape& s) {
  auto e = ir::shape_numel(s);
  if (!e)
    return lower_unsupported(n, fmt::format("the element count of {} is not linear in the size",
                                            ir::shape_to_string(s)));
  return *e;
}

Status padding_refusal(const ir::Node& n, const std::string& why) {
  return invalid_argument(
      fmt::format("{}: {}; a request padded to a larger size would read padding into real rows",
                  lower_error_prefix(n), why));
}

// Known integer contents of v (constant data or symbolic), nullopt when run-time data.
std::optional<std::vector<DimExpr>> known_ints(const LowerContext& cx, int v) {
  return reference_known_ints(cx.value(v));
}

// The launch of kernel `k` (the default configuration) with its tuning candidates.
KernelLaunch layout_launch(LowerContext& cx, int node, const std::string& prefix, LayoutKernel k,
                           const std::vector<int>& tensors, std::vector<LaunchCandidate> candidates,
                           const std::string& nodes) {
  KernelLaunch launch;
  launch.kernel = cx.add_kernel(prefix, std::move(k.def));
  for (int v : tensors) launch.args.push_back(KernelArgRef::tensor(cx.resolve(v)));
  launch.args.push_back(KernelArgRef::size());
  launch.work = k.work;
  launch.work_per_block = k.work_per_block;
  launch.block = k.block;
  launch.nodes = nodes.empty() ? cx.node(node).name : nodes;
  if (!candidates.empty()) launch.config = k.config;
  launch.candidates = std::move(candidates);
  return launch;
}

// Emits kernel `k` (the default configuration) with its tuning candidates.
Status emit_layout(LowerContext& cx, int node, const std::string& prefix, LayoutKernel k,
                   const std::vector<int>& tensors, std::vector<LaunchCandidate> candidates,
                   const std::string& nodes = {}) {
  cx.emit(node,
          layout_launch(cx, node, prefix, std::move(k), tensors, std::move(candidates), nodes));
  return Status::ok_status();
}

// A tunable kernel: the default `gen({})` and its candidates.
Status emit_layout(LowerContext& cx, int node, const std::string& prefix, const LayoutCodegen& gen,
                   const std::vector<int>& tensors, const std::string& nodes = {}) {
  return emit_layout(cx, node, prefix, gen({}), tensors, layout_candidates(gen), nodes);
}

std::vector<Mono> monos(const ir::Shape& s) {
  std::vector<Mono> m;
  for (const DimExpr& d : s) m.push_back(Mono::of(d));
  return m;
}

// --- views and copies -------------------------------------------------------------------------

// out = in, element for element (a view whose result must have a buffer of its own).
Status emit_copy(LowerContext& cx, int node, int in, int out) {
  const ir::Node& n = cx.node(node);
  KILN_ASSIGN_OR_RETURN(std::string elem, elem_type(cx, n, out));
  KILN_ASSIGN_OR_RETURN(DimExpr numel, numel_of(n, cx.shape(out)));
  StridedCopy c{elem, {Mono::of(numel)}, {Mono{}}, {}, {}};
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_strided_copy(c, numel, cfg);
  };
  return emit_layout(cx, node, "kiln_copy", gen, {in, out});
}

}  // namespace

Status emit_gemm_unpad(LowerContext& cx, int node, int in, int out, const ir::DimExpr& rows,
                       int64_t cols, int64_t in_cols, bool after_cublaslt,
                       const std::string& nodes) {
  const ir::Node& n = cx.node(node);
  KILN_ASSIGN_OR_RETURN(std::string elem, elem_type(cx, n, in));
  KILN_ASSIGN_OR_RETURN(std::string out_elem, elem_type(cx, n, out));
  auto numel = ir::dim_mul(rows, DimExpr::constant(cols));
  if (!numel) return lower_unsupported(n, "the GEMM's element count is not linear in the size");
  StridedCopy c{elem,
                {Mono::of(rows), Mono::of(DimExpr::constant(cols))},
                {Mono::of(DimExpr::constant(in_cols)), Mono{}},
                {},
                out_elem == elem ? "" : out_elem};
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_strided_copy(c, *numel, cfg);
  };
  KernelLaunch launch =
      layout_launch(cx, node, "kiln_unpad", gen({}), {in, out}, layout_candidates(gen), nodes);
  launch.after_cublaslt = after_cublaslt;
  cx.emit(node, std::move(launch));
  return Status::ok_status();
}

bool row_view_of(const LowerContext& cx, const ir::Node& n, int v, const ir::DimExpr& row) {
  static constexpr const char* kViews[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  if (!n.domain.empty() ||
      std::find(std::begin(kViews), std::end(kViews), n.op) == std::end(kViews))
    return false;
  if (n.inputs.empty() || n.inputs[0] != v || n.outputs.empty()) return false;
  const ir::Shape& out = cx.shape(n.outputs[0]);
  return !out.empty() && out.back() == row && cx.dtype(n.outputs[0]) == cx.dtype(v);
}

namespace {

// Reshape, Squeeze, Unsqueeze, Flatten: the output is the input's bytes.
Status lower_view(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  if (cx.is_graph_output(n.outputs[0])) {
    KILN_RETURN_IF_ERROR(check_readable(cx, n, n.inputs[0]));
    return emit_copy(cx, i, n.inputs[0], n.outputs[0]);
  }
  cx.alias(n.outputs[0], n.inputs[0]);
  return Status::ok_status();
}

// --- Transpose, Slice -------------------------------------------------------------------------

Status lower_transpose(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0], y = n.outputs[0];
  KILN_RETURN_IF_ERROR(check_readable(cx, n, x));
  const ir::Shape& xs = cx.shape(x);
  const std::vector<int64_t> perm = transpose_perm_attr(n, xs.size());
  if (perm.size() != xs.size()) return lower_unsupported(n, "perm does not match the rank");
  KILN_ASSIGN_OR_RETURN(std::string elem, elem_type(cx, n, y));
  KILN_ASSIGN_OR_RETURN(DimExpr numel, numel_of(n, cx.shape(y)));
  const std::vector<Mono> st = mono_strides(xs);
  StridedCopy c{elem, monos(cx.shape(y)), {}, {}, {}};
  for (int64_t p : perm) c.in_strides.push_back(st[static_cast<size_t>(p)]);
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_strided_copy(c, numel, cfg);
  };
  return emit_layout(cx, i, "kiln_transpose", gen, {x, y});
}

// ONNX's first element read on an axis of d elements (negative counts from the end, clamped).
int64_t slice_start(int64_t st, int64_t d, int64_t step) {
  if (d <= 0) return 0;
  constexpr int64_t kHuge = int64_t{1} << 62;
  st = std::clamp(st, -kHuge, kHuge);
  if (st < 0) st += d;
  return std::clamp<int64_t>(st, 0, step > 0 ? d : d - 1);
}

// Whether `y`, a slice of `x` from the start of each axis, is the first elements of x's buffer:
// the shapes differ on one axis at most, and every axis before it has extent 1.
bool leading_rows(const ir::Shape& x, const ir::Shape& y) {
  if (x.size() != y.size()) return false;
  size_t a = 0;
  while (a < x.size() && x[a] == y[a]) ++a;
  for (size_t k = a + 1; k < x.size(); ++k)
    if (!(x[k] == y[k])) return false;
  for (size_t k = 0; k < a && a < x.size(); ++k)
    if (!(y[k] == DimExpr::constant(1))) return false;
  return true;
}

// Slice: a slice that is the first elements of its input (Slice(T, 0, S) of a table made by
// compiler/passes/size_tables.h, say) is a view; any other, a strided copy.
Status lower_slice(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0], y = n.outputs[0];
  KILN_RETURN_IF_ERROR(check_readable(cx, n, x));
  const ir::Shape& xs = cx.shape(x);
  auto input_ints = [&](size_t k) -> std::optional<std::vector<DimExpr>> {
    if (k >= n.inputs.size() || n.inputs[k] < 0) return std::vector<DimExpr>{};
    return known_ints(cx, n.inputs[k]);
  };
  auto starts = input_ints(1), axes_v = input_ints(3), steps_v = input_ints(4);
  if (!starts || !axes_v || !steps_v)
    return lower_unsupported(n, "starts, axes and steps must be known at compile time");
  std::vector<int64_t> axes, steps;
  for (const DimExpr& a : *axes_v) axes.push_back(a.offset);
  for (const DimExpr& s : *steps_v) steps.push_back(s.offset);
  if (axes.empty())
    for (size_t k = 0; k < starts->size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts->size(), 1);
  if (axes.size() != starts->size() || steps.size() != starts->size())
    return lower_unsupported(n, "starts, axes and steps differ in length");

  KILN_ASSIGN_OR_RETURN(std::string elem, elem_type(cx, n, y));
  KILN_ASSIGN_OR_RETURN(DimExpr numel, numel_of(n, cx.shape(y)));
  const std::vector<Mono> st = mono_strides(xs);
  StridedCopy c{elem, monos(cx.shape(y)), st, {}, {}};
  bool prefix = true;  // every sliced axis from 0, step 1
  for (size_t k = 0; k < axes.size(); ++k) {
    auto ax = axis_normalize(axes[k], static_cast<int64_t>(xs.size()));
    if (!ax || steps[k] == 0) return lower_unsupported(n, "an axis or step is invalid");
    const auto a = static_cast<size_t>(*ax);
    const DimExpr& s0 = (*starts)[k];
    // The first element read, at two sizes: it must not move with S (see the file comment).
    const int64_t at1 = slice_start(s0.eval(1), xs[a].eval(1), steps[k]);
    const int64_t at2 = slice_start(s0.eval(2), xs[a].eval(2), steps[k]);
    if (at1 != at2)
      return padding_refusal(
          n, fmt::format("on axis {} ({}), the slice starts at an element that depends on S "
                         "(start {})",
                         a, xs[a].to_string(), s0.to_string()));
    c.in_strides[a] = st[a].times(Mono{steps[k], {}});
    c.base.push_back(st[a].times(Mono{at1, {}}));
    prefix &= at1 == 0 && steps[k] == 1;
  }
  if (prefix && !cx.is_graph_output(y) && leading_rows(xs, cx.shape(y))) {
    cx.alias(y, x);
    return Status::ok_status();
  }
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_strided_copy(c, numel, cfg);
  };
  return emit_layout(cx, i, "kiln_slice", gen, {x, y});
}

// --- Concat, Split ----------------------------------------------------------------------------

// Pieces along `axis` of `whole`: every piece but the last must have a constant length there,
// so that no piece starts at an offset that moves with S.
Status check_pieces(const ir::Node& n, const std::vector<ir::Shape>& pieces, size_t axis) {
  for (size_t k = 0; k + 1 < pieces.size(); ++k)
    if (!pieces[k][axis].is_constant())
      return padding_refusal(
          n, fmt::format("piece {} has {} elements on axis {}, so the pieces after it start at an "
                         "offset that depends on S",
                         k, pieces[k][axis].to_string(), axis));
  return Status::ok_status();
}

Status lower_concat_split(LowerContext& cx, int i, bool split) {
  const ir::Node& n = cx.node(i);
  const int whole = split ? n.inputs[0] : n.outputs[0];
  const std::vector<int> pieces =
      split ? n.outputs : std::vector<int>(n.inputs.begin(), n.inputs.end());
  const ir::Shape& ws = cx.shape(whole);
  auto ax = axis_normalize(n.attr_int("axis", 0), static_cast<int64_t>(ws.size()));
  if (!ax) return lower_unsupported(n, "the axis is out of range");
  const auto a = static_cast<size_t>(*ax);
  std::vector<ir::Shape> shapes;
  for (int v : pieces) {
    if (v < 0) return lower_unsupported(n, "an omitted piece");
    shapes.push_back(cx.shape(v));
  }
  KILN_RETURN_IF_ERROR(check_pieces(n, shapes, a));
  for (int v : split ? std::vector<int>{whole} : pieces)
    KILN_RETURN_IF_ERROR(check_readable(cx, n, v));
  KILN_ASSIGN_OR_RETURN(std::string elem, elem_type(cx, n, whole));
  KILN_ASSIGN_OR_RETURN(DimExpr numel, numel_of(n, ws));
  ChunkCopy c{elem, mono_numel(ws, 0, a), {}, split};
  const Mono inner = mono_numel(ws, a + 1);
  for (const ir::Shape& s : shapes) c.lens.push_back(Mono::of(s[a]).times(inner));
  std::vector<int> tensors;
  if (split) {
    tensors = {whole};
    tensors.insert(tensors.end(), pieces.begin(), pieces.end());
  } else {
    tensors = pieces;
    tensors.push_back(whole);
  }
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_chunk_copy(c, numel, cfg);
  };
  return emit_layout(cx, i, split ? "kiln_split" : "kiln_concat", gen, tensors);
}

Status lower_concat(LowerContext& cx, int i) { return lower_concat_split(cx, i, false); }
Status lower_split(LowerContext& cx, int i) { return lower_concat_split(cx, i, true); }

// --- Gather, GatherElements ---------------------------------------------------------------------

// Constant indices on an axis whose length depends on S must be >= 0: negative ones count from
// the padded end. Run-time indices there are padding_taint's business (passes/padding_taint.h):
// compilation stops when what they read can reach an output, naming the path.
Status check_gather_axis(const LowerContext& cx, const ir::Node& n, const DimExpr& len, int idx) {
  if (len.is_constant()) return Status::ok_status();
  auto known = known_ints(cx, idx);
  if (!known) return Status::ok_status();
  for (const DimExpr& k : *known)
    if (!k.is_constant() || k.offset < 0)
      return padding_refusal(
          n, fmt::format("index {} counts from the end of an axis of {} elements", k.to_string(),
                         len.to_string()));
  return Status::ok_status();
}

// What both gathers check and need: data and indices readable, indices safe on an axis of
// `axis_len` elements, the element types of the output and of the indices, the output's count.
struct GatherOperands {
  std::string elem, index_elem;
  DimExpr numel;
};

Result<GatherOperands> gather_operands(const LowerContext& cx, const ir::Node& n,
                                       const DimExpr& axis_len) {
  const int x = n.inputs[0], idx = n.inputs[1], y = n.outputs[0];
  KILN_RETURN_IF_ERROR(check_readable(cx, n, x));
  KILN_RETURN_IF_ERROR(check_readable(cx, n, idx));
  KILN_RETURN_IF_ERROR(check_gather_axis(cx, n, axis_len, idx));
  GatherOperands o;
  KILN_ASSIGN_OR_RETURN(o.elem, elem_type(cx, n, y));
  KILN_ASSIGN_OR_RETURN(o.index_elem, elem_type(cx, n, idx));
  KILN_ASSIGN_OR_RETURN(o.numel, numel_of(n, cx.shape(y)));
  return o;
}

Status lower_gather(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0], idx = n.inputs[1], y = n.outputs[0];
  const ir::Shape& xs = cx.shape(x);
  auto ax = axis_normalize(n.attr_int("axis", 0), static_cast<int64_t>(xs.size()));
  if (!ax) return lower_unsupported(n, "the axis is out of range");
  const auto a = static_cast<size_t>(*ax);
  KILN_ASSIGN_OR_RETURN(GatherOperands o, gather_operands(cx, n, xs[a]));
  GatherRows g{o.elem,
               o.index_elem,
               mono_numel(xs, 0, a),
               Mono::of(xs[a]),
               mono_numel(xs, a + 1),
               mono_numel(cx.shape(idx))};
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_gather_rows(g, o.numel, cfg);
  };
  return emit_layout(cx, i, "kiln_gather", gen, {x, idx, y});
}

Status lower_gather_elements(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0], idx = n.inputs[1], y = n.outputs[0];
  const ir::Shape& xs = cx.shape(x);
  auto ax = axis_normalize(n.attr_int("axis", 0), static_cast<int64_t>(xs.size()));
  if (!ax || cx.shape(idx).size() != xs.size())
    return lower_unsupported(n, "the axis or the indices' rank does not fit the data");
  const auto a = static_cast<size_t>(*ax);
  KILN_ASSIGN_OR_RETURN(GatherOperands o, gather_operands(cx, n, xs[a]));
  GatherElements g{o.elem, o.index_elem, cx.shape(idx), mono_strides(xs), xs[a], a};
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_gather_elements(g, o.numel, cfg);
  };
  return emit_layout(cx, i, "kiln_gather_elements", gen, {x, idx, y});
}

// --- GatherND ------------------------------------------------------------------------------------

Status lower_gather_nd(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0], idx = n.inputs[1], y = n.outputs[0];
  if (const int64_t b = n.attr_int("batch_dims", 0); b != 0)
    return lower_unsupported(n, fmt::format("batch_dims {}: kiln lowers GatherND with batch_dims 0", b));
  const ir::Shape &xs = cx.shape(x), &is = cx.shape(idx);
  const auto rank = static_cast<int64_t>(xs.size());
  if (is.empty() || !is.back().is_constant() || is.back().offset < 1 || is.back().offset > rank)
    return lower_unsupported(n, fmt::format("indices {} for data {}: the tuple length (the last "
                                            "dim) must be a constant from 1 to the data's rank",
                                            ir::shape_to_string(is), ir::shape_to_string(xs)));
  const int64_t tuple = is.back().offset;
  KILN_RETURN_IF_ERROR(check_readable(cx, n, x));
  KILN_RETURN_IF_ERROR(check_readable(cx, n, idx));
  // Run-time indices into the size axis are padding_taint's business; constants must not count
  // from the (padded) end.
  if (auto known = known_ints(cx, idx))
    for (size_t j = 0; j < known->size(); ++j) {
      const DimExpr& len = xs[j % static_cast<size_t>(tuple)];
      const DimExpr& k = (*known)[j];
      if (!len.is_constant() && (!k.is_constant() || k.offset < 0))
        return padding_refusal(n, fmt::format("index {} counts from the end of an axis of {} "
                                              "elements",
                                              k.to_string(), len.to_string()));
    }
  GatherNd g;
  KILN_ASSIGN_OR_RETURN(g.elem, elem_type(cx, n, y));
  KILN_ASSIGN_OR_RETURN(g.index_elem, elem_type(cx, n, idx));
  KILN_ASSIGN_OR_RETURN(DimExpr numel, numel_of(n, cx.shape(y)));
  const std::vector<Mono> strides = mono_strides(xs);
  g.lens.assign(xs.begin(), xs.begin() + tuple);
  g.strides.assign(strides.begin(), strides.begin() + tuple);
  g.inner = mono_numel(xs, static_cast<size_t>(tuple));
  g.nidx = mono_numel(is, 0, is.size() - 1);
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) {
    return codegen_gather_nd(g, numel, cfg);
  };
  return emit_layout(cx, i, "kiln_gather_nd", gen, {x, idx, y});
}

// --- Range --------------------------------------------------------------------------------------

Status lower_range(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int y = n.outputs[0];
  KILN_ASSIGN_OR_RETURN(std::string elem, elem_type(cx, n, y));
  KILN_ASSIGN_OR_RETURN(DimExpr numel, numel_of(n, cx.shape(y)));
  RangeFill r;
  r.elem = elem;
  r.is_float = dtype_is_float(cx.dtype(y));
  if (r.is_float) {
    double v[2];
    for (size_t k : {0, 2}) {
      const ir::Value& val = cx.value(n.inputs[k]);
      std::optional<double> scalar;
      if (val.constant)
        if (auto t = reference_decode_constant(val); t.ok() && t->data.size() == 1)
          scalar = t->data[0];
      if (!scalar)
        return lower_unsupported(n, fmt::format("a float Range needs a constant '{}'", val.name));
      v[k / 2] = *scalar;
    }
    r.fstart = v[0];
    r.fdelta = v[1];
  } else {
    auto start = known_ints(cx, n.inputs[0]), delta = known_ints(cx, n.inputs[2]);
    if (!start || !delta || start->size() != 1 || delta->size() != 1 ||
        !delta->front().is_constant())
      return lower_unsupported(n, "start and delta must be known at compile time");
    r.start = start->front();
    r.delta = delta->front().offset;
    if (!r.start.is_constant())
      return padding_refusal(
          n, fmt::format("the range starts at {}, which depends on S", r.start.to_string()));
  }
  return emit_layout(cx, i, "kiln_range", codegen_range(r, numel), {y}, {});
}

// --- ConstantOfShape ---------------------------------------------------------------------------

// A shape that depends on S (a constant one was folded by the importer): a fill, written as a
// Range with step 0. The importer turns the `value` tensor into attrs "value" (one double).
Status lower_constant_of_shape(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int y = n.outputs[0];
  RangeFill r;
  KILN_ASSIGN_OR_RETURN(r.elem, elem_type(cx, n, y));
  KILN_ASSIGN_OR_RETURN(DimExpr numel, numel_of(n, cx.shape(y)));
  double value = 0.0;
  if (n.has_attr("value")) {
    const auto& a = n.attrs.at("value");
    const auto* v = std::get_if<std::vector<double>>(&a);
    if (!v || v->size() != 1) return lower_unsupported(n, "'value' must hold one element");
    value = v->front();
  }
  r.is_float = dtype_is_float(cx.dtype(y));
  r.fstart = value;
  r.fdelta = 0;
  r.start = DimExpr::constant(r.is_float ? 0 : ref_to_int(value));
  r.delta = 0;
  return emit_layout(cx, i, "kiln_fill", codegen_range(r, numel), {y}, {});
}

// --- kiln.Rotary --------------------------------------------------------------------------------

// Rotary node `i` as a kernel: `x_base` gets the buffer X is read from (X itself, or the base
// of the view chain that feeds it), `numel` X's element count.
Result<RotaryKernel> rotary_kernel(const LowerContext& cx, const ViewChains& chains, int i,
                                   int& x_base, DimExpr& numel) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0], cs = n.inputs[1], sn = n.inputs[2];
  for (int v : {x, cs, sn}) KILN_RETURN_IF_ERROR(check_readable(cx, n, v));
  const ir::Shape& xs = cx.shape(x);
  const ir::Shape& ts = cx.shape(cs);
  if (xs.empty() || ts.empty() || !xs.back().is_constant() || !ts.back().is_constant() ||
      ts.size() > xs.size() || cx.shape(sn) != ts)
    return lower_unsupported(n, fmt::format("X {} and cos/sin {} do not fit",
                                            ir::shape_to_string(xs), ir::shape_to_string(ts)));
  if (!dtype_is_float(cx.dtype(cs)) || cx.dtype(sn) != cx.dtype(cs))
    return lower_unsupported(n, "cos and sin must be float tables of one dtype");
  RotaryKernel r;
  KILN_ASSIGN_OR_RETURN(r.elem, elem_type(cx, n, x));
  KILN_ASSIGN_OR_RETURN(r.table_elem, elem_type(cx, n, cs));
  KILN_ASSIGN_OR_RETURN(numel, numel_of(n, xs));
  r.d = xs.back().offset;
  r.rotary_dim = n.attr_int("rotary_dim", 0) == 0 ? r.d : n.attr_int("rotary_dim", 0);
  r.table_width = ts.back().offset;
  r.interleaved = n.attr_int("interleaved", 0) != 0;
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 != 0 || r.rotary_dim > r.d ||
      (r.table_width != r.rotary_dim / 2 && r.table_width != r.rotary_dim) ||
      (r.table_width == r.rotary_dim && r.interleaved))
    return lower_unsupported(n, fmt::format("rotary_dim {} does not fit head size {} and table "
                                            "width {}",
                                            r.rotary_dim, r.d, r.table_width));
  r.x.x_lead.assign(xs.begin(), xs.end() - 1);
  r.table_lead.assign(ts.begin(), ts.end() - 1);
  for (size_t j = 0; j < r.table_lead.size(); ++j) {
    const DimExpr& t = r.table_lead[j];
    if (t != DimExpr::constant(1) && t != r.x.x_lead[r.x.x_lead.size() - r.table_lead.size() + j])
      return lower_unsupported(n, fmt::format("cos/sin {} do not broadcast to X {}",
                                              ir::shape_to_string(ts), ir::shape_to_string(xs)));
  }
  // X through the views that feed it (Split/Slice → Reshape → Transpose of a GEMM's output),
  // claimed by attention_absorb_views: the kernel reads the GEMM's buffer in place.
  const InChain& chain = chains.rotary.at(i);
  x_base = x;
  if (!chain.nodes.empty()) {
    r.x.x_lead_strides.assign(chain.st.begin(), chain.st.end() - 1);
    r.x.x_offset = chain.offset;
    x_base = chain.base;
  }
  return r;
}

// A later rotary node of the same piece that one launch can compute with `r` (node `i`): the
// same tables and attributes, X read from the same buffer (K's slice of the QKV product beside
// Q's); -1 when none.
int rotary_partner(const LowerContext& cx, const ViewChains& chains, int i, const RotaryKernel& r,
                   int x_base) {
  const ir::Node& n = cx.node(i);
  if (r.x.x_lead_strides.empty()) return -1;
  for (const auto& [j, chain] : chains.rotary) {
    const ir::Node& m = cx.node(j);
    if (j <= i || cx.done(j) || cx.piece_of(j) != cx.piece_of(i) || chain.base != x_base ||
        chain.nodes.empty() || m.inputs[1] != n.inputs[1] || m.inputs[2] != n.inputs[2] ||
        m.attr_int("rotary_dim", 0) != n.attr_int("rotary_dim", 0) ||
        m.attr_int("interleaved", 0) != n.attr_int("interleaved", 0) ||
        cx.shape(m.inputs[0]).back() != cx.shape(n.inputs[0]).back() ||
        cx.shape(m.inputs[0]).size() != cx.shape(n.inputs[0]).size())
      continue;
    return j;
  }
  return -1;
}

// kiln.Rotary; with a partner (rotary_partner), one launch for both, named after both nodes.
Status lower_rotary(LowerContext& cx, int i) {
  const ViewChains chains = view_chains(cx);
  int x_base = -1;
  DimExpr numel;
  KILN_ASSIGN_OR_RETURN(RotaryKernel r, rotary_kernel(cx, chains, i, x_base, numel));
  std::vector<int> tensors = {x_base, cx.node(i).inputs[1], cx.node(i).inputs[2],
                              cx.node(i).outputs[0]};
  const int j = rotary_partner(cx, chains, i, r, x_base);
  std::string nodes;
  if (j >= 0) {
    int base_j = -1;
    DimExpr numel_j;
    KILN_ASSIGN_OR_RETURN(RotaryKernel rj, rotary_kernel(cx, chains, j, base_j, numel_j));
    if (rj.elem == r.elem && rj.table_elem == r.table_elem && rj.table_lead == r.table_lead) {
      r.second = rj.x;
      numel = {numel.coef + numel_j.coef, numel.offset + numel_j.offset};
      tensors.push_back(cx.node(j).outputs[0]);
      nodes = cx.node(i).name + "+" + cx.node(j).name;
      cx.mark_done(j);
    }
  }
  const LayoutCodegen gen = [&](const LayoutConfig& cfg) { return codegen_rotary(r, numel, cfg); };
  return emit_layout(cx, i, "kiln_rotary", gen, tensors, nodes);
}

}  // namespace

std::vector<LowerRule> layout_rules() {
  return {{"Reshape", lower_view},        {"Squeeze", lower_view},
          {"Unsqueeze", lower_view},      {"Flatten", lower_view},
          {"Transpose", lower_transpose}, {"Slice", lower_slice},
          {"Concat", lower_concat},       {"Split", lower_split},
          {"Gather", lower_gather},       {"GatherElements", lower_gather_elements},
          {"GatherND", lower_gather_nd},    {"ConstantOfShape", lower_constant_of_shape},
          {"Range", lower_range},         {"kiln.Rotary", lower_rotary}};
}

}  // namespace kiln::compiler
