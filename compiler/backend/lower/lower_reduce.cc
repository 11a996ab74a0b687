// Row-reduction family: LayerNormalization and RMSNormalization (with a pending residual Add
// fused in front), Softmax over the last axis, ReduceSum / ReduceMean / ReduceMax over trailing
// axes. Every reduced axis must be a compile-time constant: the runtime pads a request of size S
// up to a captured size, and padding rows must never reach a real row's result.
#include <fmt/format.h>

#include <cstring>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/lower_rules.h"
#include "compiler/backend/lower/reduce_codegen.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

bool is_float_storage(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

ir::Shape strip_leading_ones(const ir::Shape& s) {
  size_t k = 0;
  while (k < s.size() && s[k] == ir::DimExpr::constant(1)) ++k;
  return ir::Shape(s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
}

// Rows and row length of `x` reduced over [axis, rank): the row length must not depend on S.
Status split_rows(const LowerContext& cx, const ir::Node& n, int x, int64_t axis, ir::DimExpr* rows,
                  int64_t* cols) {
  const ir::Shape& s = cx.shape(x);
  *cols = 1;
  for (size_t a = static_cast<size_t>(axis); a < s.size(); ++a) {
    if (!s[a].is_constant())
      return invalid_argument(fmt::format(
          "{}: axis {} of '{}' {} has the size dimension ({}); a padded request would mix its "
          "padding rows into real results, so kiln reduces only over constant axes",
          lower_error_prefix(n), a, cx.value(x).name, ir::shape_to_string(s), s[a].to_string()));
    *cols *= s[a].offset;
  }
  auto r = ir::shape_numel(ir::Shape(s.begin(), s.begin() + axis));
  if (!r)
    return lower_unsupported(
        n, fmt::format("the rows of {} are not linear in the size", ir::shape_to_string(s)));
  *rows = *r;
  if (*cols < 1) return lower_unsupported(n, "an empty row");
  return Status::ok_status();
}

Status require_float(const LowerContext& cx, const ir::Node& n, int v) {
  if (is_float_storage(cx.dtype(v))) return Status::ok_status();
  return lower_unsupported(n, fmt::format("tensor '{}' is {}; expected f32, f16 or bf16",
                                          cx.value(v).name, dtype_name(cx.dtype(v))));
}

bool used(const LowerContext& cx, int v) {
  return v >= 0 && (cx.is_graph_output(v) || !cx.consumers(v).empty());
}

// Checks a LayerNormalization / RMSNormalization node and describes its kernel (no residual).
Result<NormKernel> norm_plan(const LowerContext& cx, int node) {
  const ir::Node& n = cx.node(node);
  NormKernel k;
  k.rms = n.op == "RMSNormalization";
  if (n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0)
    return invalid_argument(fmt::format("{}: expected X and Scale", lower_error_prefix(n)));
  k.x = n.inputs[0];
  k.scale = n.inputs[1];
  k.bias = !k.rms && n.inputs.size() > 2 ? n.inputs[2] : -1;
  k.y = n.outputs[0];
  for (size_t o = 1; o < n.outputs.size(); ++o)
    if (used(cx, n.outputs[o]))
      return lower_unsupported(
          n, fmt::format("output '{}' (the {} statistics) is used; kiln's norm kernel writes "
                         "only Y",
                         cx.value(n.outputs[o]).name, o == 1 ? "Mean" : "InvStdDev"));
  k.dtype = cx.dtype(k.x);
  KILN_RETURN_IF_ERROR(require_float(cx, n, k.x));
  const int64_t rank = cx.rank(k.x);
  const int64_t attr = n.attr_int("axis", -1);
  const int64_t axis = attr < 0 ? attr + rank : attr;
  if (axis < 0 || axis >= rank)
    return invalid_argument(fmt::format("{}: axis {} is out of range for {}", lower_error_prefix(n),
                                        attr, ir::shape_to_string(cx.shape(k.x))));
  KILN_RETURN_IF_ERROR(split_rows(cx, n, k.x, axis, &k.rows, &k.cols));
  const ir::Shape& xs = cx.shape(k.x);
  const ir::Shape normalized = strip_leading_ones(ir::Shape(xs.begin() + axis, xs.end()));
  for (int p : {k.scale, k.bias}) {
    if (p < 0) continue;
    if (cx.dtype(p) != k.dtype)
      return lower_unsupported(n, fmt::format("'{}' is {}, the input {}", cx.value(p).name,
                                              dtype_name(cx.dtype(p)), dtype_name(k.dtype)));
    if (strip_leading_ones(cx.shape(p)) != normalized)
      return lower_unsupported(
          n, fmt::format("'{}' {} broadcasts over the normalized axes {}; kiln's norm kernel "
                         "needs one value per element",
                         cx.value(p).name, ir::shape_to_string(cx.shape(p)),
                         ir::shape_to_string(normalized)));
  }
  k.epsilon = static_cast<float>(n.attr_float("epsilon", 1e-5));
  return k;
}

std::vector<KernelArgRef> norm_args(LowerContext& cx, const NormKernel& k) {
  std::vector<KernelArgRef> args;
  for (int v : {k.x, k.residual, k.sum, k.scale, k.bias, k.y})
    if (v >= 0) args.push_back(KernelArgRef::tensor(cx.resolve(v)));
  return args;
}

void emit_norm(LowerContext& cx, int node, const NormKernel& k, const std::string& nodes,
               bool before_cublaslt = false) {
  const RowKernel row{.prefix = k.rms ? "kiln_rmsnorm" : "kiln_layernorm",
                      .cols = k.cols,
                      .dtype = k.dtype,
                      .holds_row = true,
                      .rows = k.rows,
                      .codegen = [k](const RowGeometry& geo) { return codegen_norm(k, geo); }};
  emit_row_kernel(cx, node, row, norm_args(cx, k), nodes, before_cublaslt);
}

// The GEMM that may take norm `node` as its skinny kernel's prologue (reduce_codegen.h), or -1.
// Only where nodes fuse and skinny kernels may run.
int prologue_gemm(const LowerContext& cx, int node, const NormKernel& k) {
  if (!cx.fuse() || cx.skinny_max_m() < 1 || k.residual >= 0) return -1;
  const ir::Shape& xs = cx.shape(k.x);
  if (xs.empty() || xs.back() != ir::DimExpr::constant(k.cols) || cx.dtype(k.y) != k.dtype)
    return -1;  // over the last axis only, as the GEMM's K
  for (int v = k.y;;) {
    const int c = cx.sole_consumer(v);
    if (c < 0 || cx.piece_of(c) != cx.piece_of(node)) return -1;
    const ir::Node& n = cx.node(c);
    if (row_view_of(cx, n, v, ir::DimExpr::constant(k.cols))) {
      v = n.outputs[0];
      continue;
    }
    if (n.inputs.size() < 2 || n.inputs[0] != v || n.inputs[1] == v) return -1;
    const std::string op = n.qualified_op();
    const bool gemm = op == "MatMul" || op == "kiln.GatedMatMul" ||
                      (op == "Gemm" && n.attr_int("transA", 0) == 0);
    return gemm ? c : -1;
  }
}

Status lower_norm(LowerContext& cx, int i) {
  KILN_ASSIGN_OR_RETURN(NormKernel k, norm_plan(cx, i));
  if (prologue_gemm(cx, i, k) >= 0) {
    cx.defer_norm(k.y, i);  // the GEMM emits it (emit_deferred_norm)
    return Status::ok_status();
  }
  emit_norm(cx, i, k, cx.node(i).name);
  return Status::ok_status();
}

Status lower_softmax(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0];
  KILN_RETURN_IF_ERROR(require_float(cx, n, x));
  const int64_t rank = cx.rank(x);
  const int64_t attr = n.attr_int("axis", -1);
  const int64_t axis = attr < 0 ? attr + rank : attr;
  if (rank == 0 || axis != rank - 1)
    return lower_unsupported(
        n, fmt::format("softmax over axis {} of {}: kiln lowers only the last axis (transpose "
                       "the data so that the softmax axis is last)",
                       attr, ir::shape_to_string(cx.shape(x))));
  ir::DimExpr rows;
  int64_t cols = 0;
  KILN_RETURN_IF_ERROR(split_rows(cx, n, x, axis, &rows, &cols));
  if (cx.dtype(n.outputs[0]) != cx.dtype(x))
    return lower_unsupported(n, "output dtype differs from the input's");
  const DType dtype = cx.dtype(x);
  const RowKernel row{
      .prefix = "kiln_softmax",
      .cols = cols,
      .dtype = dtype,
      .holds_row = true,
      .rows = rows,
      .codegen = [=](const RowGeometry& geo) { return codegen_softmax(dtype, cols, rows, geo); }};
  emit_row_kernel(
      cx, i, row,
      {KernelArgRef::tensor(cx.resolve(x)), KernelArgRef::tensor(cx.resolve(n.outputs[0]))},
      n.name);
  return Status::ok_status();
}

// The axes a Reduce* node reduces: attribute (older opsets) or constant input 1.
Result<std::vector<int64_t>> reduce_axes(const LowerContext& cx, const ir::Node& n) {
  if (n.has_attr("axes")) return n.attr_ints("axes");
  if (n.inputs.size() < 2 || n.inputs[1] < 0) return std::vector<int64_t>{};
  const ir::Value& a = cx.value(n.inputs[1]);
  std::vector<int64_t> axes;
  if (a.constant) {
    KILN_ASSIGN_OR_RETURN(RefTensor t, reference_decode_constant(a));
    for (double d : t.data) axes.push_back(static_cast<int64_t>(d));
    return axes;
  }
  if (a.producer < 0 && a.ints) {
    for (const ir::DimExpr& d : *a.ints) {
      if (!d.is_constant())
        return lower_unsupported(n, fmt::format("axes '{}' depend on the size", a.name));
      axes.push_back(d.offset);
    }
    return axes;
  }
  return lower_unsupported(n, fmt::format("axes '{}' are computed at run time", a.name));
}

Status lower_reduce(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  const int x = n.inputs[0];
  KILN_RETURN_IF_ERROR(require_float(cx, n, x));
  KILN_RETURN_IF_ERROR(require_float(cx, n, n.outputs[0]));
  const int64_t rank = cx.rank(x);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> axes, reduce_axes(cx, n));
  if (axes.empty() && n.attr_int("noop_with_empty_axes", 0) != 0)
    return lower_unsupported(n, "noop_with_empty_axes with no axes (an identity) is not lowered");
  std::vector<bool> mask(static_cast<size_t>(rank), axes.empty());
  for (int64_t a : axes) {
    const int64_t norm = a < 0 ? a + rank : a;
    if (norm < 0 || norm >= rank)
      return invalid_argument(
          fmt::format("{}: axis {} is out of range for rank {}", lower_error_prefix(n), a, rank));
    mask[static_cast<size_t>(norm)] = true;
  }
  // The reduced axes must be a trailing run [first, rank): then rows are contiguous.
  int64_t first = rank;
  while (first > 0 && mask[static_cast<size_t>(first - 1)]) --first;
  for (int64_t a = 0; a < first; ++a)
    if (mask[static_cast<size_t>(a)])
      return lower_unsupported(
          n, fmt::format("reduces axes [{}] of {}; kiln lowers only reductions over the last "
                         "axes",
                         fmt::join(axes, ", "), ir::shape_to_string(cx.shape(x))));
  if (first == rank) return lower_unsupported(n, "reduces no axis");
  ir::DimExpr rows;
  int64_t cols = 0;
  KILN_RETURN_IF_ERROR(split_rows(cx, n, x, first, &rows, &cols));
  const int kind = n.op == "ReduceSum" ? 0 : n.op == "ReduceMean" ? 1 : 2;
  const DType in = cx.dtype(x), out = cx.dtype(n.outputs[0]);
  const RowKernel row{.prefix = "kiln_reduce",
                      .cols = cols,
                      .dtype = in,
                      .holds_row = false,  // reduce_rows streams its row
                      .rows = rows,
                      .codegen = [=](const RowGeometry& geo) {
                        return codegen_row_reduce(in, out, kind, cols, rows, geo);
                      }};
  emit_row_kernel(
      cx, i, row,
      {KernelArgRef::tensor(cx.resolve(x)), KernelArgRef::tensor(cx.resolve(n.outputs[0]))},
      n.name);
  return Status::ok_status();
}

}  // namespace

int residual_norm_consumer(const LowerContext& cx, int add) {
  const ir::Node& a = cx.node(add);
  if (a.op != "Add" || !a.domain.empty() || a.inputs.size() != 2 || a.outputs.empty()) return -1;
  const int sum = a.outputs[0];
  for (int v : a.inputs)
    if (v < 0 || cx.shape(v) != cx.shape(sum) || cx.dtype(v) != cx.dtype(sum)) return -1;
  if (!is_float_storage(cx.dtype(sum))) return -1;
  for (int c : cx.consumers(sum)) {
    const ir::Node& n = cx.node(c);
    if (cx.done(c) || !n.domain.empty() || n.inputs.empty() || n.inputs[0] != sum) continue;
    if (n.op != "LayerNormalization" && n.op != "RMSNormalization") continue;
    if (!norm_plan(cx, c).ok()) continue;
    bool ready = true;
    for (size_t k = 1; k < n.inputs.size(); ++k)
      ready &= n.inputs[k] < 0 || cx.is_constant(n.inputs[k]) || cx.available_at(n.inputs[k], add);
    if (ready) return c;
  }
  return -1;
}

Status lower_norm_with_residual(LowerContext& cx, int add, int norm) {
  KILN_ASSIGN_OR_RETURN(NormKernel k, norm_plan(cx, norm));
  const ir::Node& a = cx.node(add);
  k.x = a.inputs[0];
  k.residual = a.inputs[1];
  const int sum = a.outputs[0];
  bool store = cx.is_graph_output(sum);
  for (int c : cx.consumers(sum)) store |= c != norm;
  k.sum = store ? sum : -1;
  emit_norm(cx, add, k, a.name + "+" + cx.node(norm).name);
  cx.mark_done(add);
  cx.mark_done(norm);
  return Status::ok_status();
}

Result<SkinnyNorm> deferred_norm_prologue(const LowerContext& cx, int node) {
  KILN_ASSIGN_OR_RETURN(NormKernel k, norm_plan(cx, node));
  return SkinnyNorm{.rms = k.rms,
                    .x = cx.resolve(k.x),
                    .scale = cx.resolve(k.scale),
                    .bias = k.bias >= 0 ? cx.resolve(k.bias) : -1,
                    .epsilon = k.epsilon};
}

Status emit_deferred_norm(LowerContext& cx, int node, bool before_cublaslt) {
  KILN_ASSIGN_OR_RETURN(NormKernel k, norm_plan(cx, node));
  emit_norm(cx, node, k, cx.node(node).name, before_cublaslt);
  return Status::ok_status();
}

std::vector<LowerRule> reduce_rules() {
  return {{"LayerNormalization", lower_norm}, {"RMSNormalization", lower_norm},
          {"Softmax", lower_softmax},         {"ReduceSum", lower_reduce},
          {"ReduceMean", lower_reduce},       {"ReduceMax", lower_reduce}};
}

}  // namespace kiln::compiler
