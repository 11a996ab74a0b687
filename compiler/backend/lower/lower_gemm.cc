// GEMM family: MatMul and Gemm → cuBLASLt steps in f32 (tf32 tensor cores with precision tf32),
// f16 or bf16 storage (fp32 accumulation), with the nodes after the product folded into the
// cuBLASLt epilogue where the math is exactly the graph's.
//
// cuBLASLt computes D = act(alpha·op(A)op(B) + beta·C + bias): the bias and the activation come
// after C. So a chain  GEMM → Add(bias [N]) → Add(residual, D's shape) → Relu|Gelu(tanh)  folds
// (either Add order), but nothing after the activation does: gelu(AB + b) + r stays two steps.
// Only the tanh GELU folds: cuBLASLt's GELU epilogue is the tanh approximation, and the erf form
// differs from it by up to ~1e-3, beyond the f32 tolerance. Casts to the same dtype (what
// precision lowering leaves of mixed-precision casts) are looked through anywhere in the chain, and
// so are views that keep D's rows (a 2-D Gemm reshaped back to [B, S, N] before its activation).
//
// kiln.GatedMatMul (passes/fuse_gated_mlp) is a GEMM into a [M, 2N] product and a gating kernel,
// or, at decode sizes, one skinny kernel with the gating in its epilogue.
//
// Padded rows: cuBLASLt's fast kernels need 16-byte aligned rows, and a D whose rows of N
// elements are not (GPT-2's 50257-word LM head) gets an align-1 kernel: on the H200, 403 µs for
// GPT-2's LM head at 512 tokens, most of the model's GEMM time. A GEMM with such an N (at least
// kPadLeastN) and a constant weight only it reads computes instead over the weight padded with
// zeros to the next aligned width Np, into an [M, Np] buffer, and a copy kernel moves the first N
// columns of each row into D. Only where cuBLASLt runs: a skinny kernel reads the first N rows of
// the same padded [Np, K] weight and writes D directly. When a Cast to another float dtype alone
// reads D (the f32 logits of an f16 model), the skinny kernel computes all Np rows into the
// padded buffer as well, and the copy, run at every size, writes the Cast's output converted:
// the Cast's own launch is saved.
//
// A norm whose only reader is the GEMM's A (lower_reduce.cc leaves it: reduce_codegen.h, "Norm
// prologues") is emitted here, before the GEMM's steps; where a skinny kernel computes the GEMM
// it normalises the rows itself and the norm's launch runs only at the cuBLASLt sizes.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "compiler/backend/lower/elementwise_codegen.h"
#include "compiler/backend/lower/lower_rules.h"
#include "compiler/backend/lower/reduce_codegen.h"
#include "compiler/backend/lower/skinny_gemm_codegen.h"

namespace kiln::compiler {
namespace {

bool gemm_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// All operands share one storage dtype (the precision pass makes activations and weights agree).
Result<DType> require_data_dtype(const LowerContext& cx, const ir::Node& n) {
  const DType want = cx.dtype(n.inputs[0]);
  if (!gemm_dtype(want))
    return lower_unsupported(n, fmt::format("tensor '{}' is {}; GEMMs take f32, f16 or bf16",
                                            cx.value(n.inputs[0]).name, dtype_name(want)));
  std::vector<int> vs(n.inputs.begin(), n.inputs.end());
  vs.push_back(n.outputs[0]);
  for (int v : vs)
    if (v >= 0 && cx.dtype(v) != want)
      return lower_unsupported(n, fmt::format("tensor '{}' is {} but '{}' is {}; a GEMM's "
                                              "operands must share one dtype",
                                              cx.value(v).name, dtype_name(cx.dtype(v)),
                                              cx.value(n.inputs[0]).name, dtype_name(want)));
  return want;
}

// A bias-like operand for an epilogue: shape [N] or [1, N] of the GEMM's dtype, available before
// the GEMM.
bool bias_like(const LowerContext& cx, int v, const GemmLaunch& gemm, int gemm_node) {
  const ir::Shape& s = cx.shape(v);
  bool fits = (s.size() == 1 && s[0] == gemm.n) ||
              (s.size() == 2 && s[0] == ir::DimExpr::constant(1) && s[1] == gemm.n);
  return fits && cx.dtype(v) == cx.dtype(gemm.a) && cx.available_at(v, gemm_node);
}

// An addend C for cuBLASLt: exactly D's shape and dtype (so C's layout is D's), available before
// the GEMM.
bool addend_like(const LowerContext& cx, int v, const GemmLaunch& gemm, int gemm_node) {
  return cx.shape(v) == cx.shape(gemm.d) && cx.dtype(v) == cx.dtype(gemm.d) &&
         cx.available_at(v, gemm_node);
}

Epilogue epilogue_of(bool bias, const std::string& act) {
  if (act == "relu") return bias ? Epilogue::kBiasRelu : Epilogue::kRelu;
  if (act == "gelu") return bias ? Epilogue::kBiasGelu : Epilogue::kGelu;
  return bias ? Epilogue::kBias : Epilogue::kNone;
}

// The skinny kernel's view of deferred norm `norm`; nullopt for -1.
Result<std::optional<SkinnyNorm>> norm_prologue(const LowerContext& cx, int norm) {
  if (norm < 0) return std::optional<SkinnyNorm>{};
  KILN_ASSIGN_OR_RETURN(SkinnyNorm s, deferred_norm_prologue(cx, norm));
  return std::optional<SkinnyNorm>{s};
}

// Folds following bias / residual Adds and one activation into the GEMM (see the file comment
// for which chains are exact).
void fold_epilogue(LowerContext& cx, int gemm_node, GemmLaunch& gemm) {
  if (gemm.batch != ir::DimExpr::constant(1)) return;
  std::string act;
  while (cx.fuse()) {  // level 0 keeps only the Gemm's own bias
    const int next = cx.sole_consumer(gemm.d);
    if (next < 0) break;
    const ir::Node& nn = cx.node(next);
    if (!nn.domain.empty()) break;
    const bool same_dtype_cast =
        nn.op == "Cast" && cx.dtype(nn.inputs[0]) == cx.dtype(nn.outputs[0]);
    if (!act.empty() && !same_dtype_cast) break;  // cuBLASLt adds nothing after the activation
    if (nn.op == "Add" && nn.inputs.size() == 2 && nn.inputs[0] != nn.inputs[1]) {
      const int other = nn.inputs[0] == gemm.d ? nn.inputs[1] : nn.inputs[0];
      if (cx.shape(nn.outputs[0]) != cx.shape(gemm.d) ||
          cx.dtype(nn.outputs[0]) != cx.dtype(gemm.d))
        break;
      if (gemm.bias < 0 && bias_like(cx, other, gemm, gemm_node)) {
        gemm.bias = other;
      } else if (gemm.c < 0 && addend_like(cx, other, gemm, gemm_node)) {
        gemm.c = other;
        gemm.beta = 1.0f;
      } else {
        break;
      }
    } else if (same_dtype_cast) {
      // A Cast to the same dtype (precision lowering turns casts to f32 inside the graph into
      // casts to the compute dtype) moves nothing: look through it.
    } else if (row_view_of(cx, nn, gemm.d, gemm.n)) {
      // A view that keeps rows of N (exporters reshape [M, N] back to [B, S, N] between a
      // Gemm and its bias or activation): D's bytes are the view's, so look through it.
    } else if (nn.op == "Relu" && act.empty()) {
      act = "relu";
    } else if (nn.op == "Gelu" && act.empty() && nn.attr_string("approximate", "none") == "tanh") {
      act = "gelu";
    } else {
      break;
    }
    gemm.d = nn.outputs[0];
    gemm.nodes += "+" + nn.name;
    cx.mark_done(next);
  }
  gemm.epilogue = epilogue_of(gemm.bias >= 0, act);
}

// Shapes → M, N, K, batch and strides. MatMul follows numpy: a 1-D A is [1,K], a 1-D B is [K,1]
// (same memory as the result without that dim); a B without batch dims (or all 1) folds A's
// leading dims into M; otherwise strided-batched with either side broadcast over the batch.
Status gemm_shapes(const LowerContext& cx, const ir::Node& n, GemmLaunch& gemm) {
  ir::Shape a = cx.shape(n.inputs[0]), b = cx.shape(n.inputs[1]);
  if (n.op == "Gemm") {
    if (a.size() != 2 || b.size() != 2) return lower_unsupported(n, "Gemm operands must be 2-D");
    gemm.trans_a = n.attr_int("transA", 0) != 0;
    gemm.trans_b = n.attr_int("transB", 0) != 0;
    gemm.alpha = static_cast<float>(n.attr_float("alpha", 1.0));
    gemm.m = gemm.trans_a ? a[1] : a[0];
    gemm.k = gemm.trans_a ? a[0] : a[1];
    gemm.n = gemm.trans_b ? b[0] : b[1];
    return Status::ok_status();
  }
  if (a.empty() || b.empty()) return lower_unsupported(n, "scalar operands are not supported");
  if (a.size() == 1) a.insert(a.begin(), ir::DimExpr::constant(1));
  if (b.size() == 1) b.push_back(ir::DimExpr::constant(1));
  ir::Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  auto a_batch = ir::shape_numel(ab), b_batch = ir::shape_numel(bb);
  if (!a_batch || !b_batch)
    return lower_unsupported(n, fmt::format("batch dims {} / {} are not linear in the size",
                                            ir::shape_to_string(ab), ir::shape_to_string(bb)));
  gemm.k = a.back();
  gemm.n = b.back();
  if (*b_batch == ir::DimExpr::constant(1)) {  // [..., M, K] @ [K, N]: fold leading dims into M
    ir::Shape lead(a.begin(), a.end() - 1);
    auto m = ir::shape_numel(lead);
    if (!m)
      return lower_unsupported(
          n, fmt::format("M = {} is not linear in the size", ir::shape_to_string(lead)));
    gemm.m = *m;
    return Status::ok_status();
  }
  // Batch dims must agree after dropping leading 1s, unless A's are all 1 (A broadcast).
  auto strip = [](ir::Shape s) {
    while (!s.empty() && s.front() == ir::DimExpr::constant(1)) s.erase(s.begin());
    return s;
  };
  const bool a_broadcast = *a_batch == ir::DimExpr::constant(1);
  if (!a_broadcast && strip(ab) != strip(bb))
    return lower_unsupported(n,
                             fmt::format("batch dims {} and {} must be equal (or one side's all 1)",
                                         ir::shape_to_string(ab), ir::shape_to_string(bb)));
  gemm.m = a[a.size() - 2];
  gemm.batch = *b_batch;
  auto mk = ir::dim_mul(gemm.m, gemm.k), kn = ir::dim_mul(gemm.k, gemm.n),
       mn = ir::dim_mul(gemm.m, gemm.n);
  if (!mk || !kn || !mn) return lower_unsupported(n, "strides not linear in the size");
  gemm.stride_a = a_broadcast ? ir::DimExpr::constant(0) : *mk;
  gemm.stride_b = *kn;
  gemm.stride_d = *mn;
  return Status::ok_status();
}

constexpr int64_t kPadLeastN = 512;

// A new constant: constant `v` ([rows, cols] row-major) grown with zeros to [rows_to, cols_to],
// of shape `shape`.
int zero_padded(LowerContext& cx, int v, int64_t rows, int64_t cols, int64_t rows_to,
                int64_t cols_to, ir::Shape shape) {
  const ir::Value& val = cx.value(v);
  const size_t elem = dtype_size(val.dtype);
  ir::Constant c;
  for (const ir::DimExpr& d : shape) c.dims.push_back(d.offset);
  c.bytes.assign(static_cast<size_t>(rows_to * cols_to) * elem, 0);
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(val.constant->bytes.data() + static_cast<size_t>(r * cols) * elem,
                static_cast<size_t>(cols) * elem,
                c.bytes.data() + static_cast<size_t>(r * cols_to) * elem);
  const std::string name = val.name + "/padded";
  const DType dtype = val.dtype;
  return cx.new_value(name, dtype, std::move(shape), std::move(c));
}

// Whether constant `v` holds exactly `elems` elements of its dtype.
bool constant_of(const LowerContext& cx, int v, int64_t elems) {
  const ir::Value& val = cx.value(v);
  return val.constant &&
         val.constant->bytes.size() == static_cast<size_t>(elems) * dtype_size(val.dtype);
}

// "Padded rows" (file comment): pads the weight, the bias and D of `gemm` to the aligned width
// and points `skinny`'s weight at the padded one. Returns D's value before padding, or -1 when
// the GEMM keeps its N (aligned already, too narrow, or a weight or an addend it cannot pad).
int pad_gemm_n(LowerContext& cx, int node, GemmLaunch& gemm, std::optional<SkinnyLaunch>& skinny) {
  if (!cx.fuse() || gemm.batch != ir::DimExpr::constant(1) || gemm.trans_a || gemm.c >= 0 ||
      !gemm.n.is_constant() || !gemm.k.is_constant())
    return -1;
  const int64_t n = gemm.n.offset, k = gemm.k.offset;
  const int64_t align = 16 / static_cast<int64_t>(dtype_size(cx.dtype(gemm.a)));
  if (n < kPadLeastN || n % align == 0) return -1;
  const int64_t np = (n + align - 1) / align * align;
  // B: the skinny lowering's [N, K] copy, or the node's own constant when nothing else reads it.
  const bool own_copy = gemm.b != cx.resolve(cx.node(node).inputs[1]);
  if (!constant_of(cx, gemm.b, k * n) ||
      (!own_copy && (cx.consumers(gemm.b).size() != 1 || cx.is_graph_output(gemm.b))))
    return -1;
  if (gemm.bias >= 0 && !constant_of(cx, gemm.bias, n)) return -1;
  ir::Shape padded_d = cx.shape(gemm.d);
  if (padded_d.empty() || padded_d.back() != gemm.n) return -1;
  padded_d.back() = ir::DimExpr::constant(np);

  const int b = gemm.trans_b ? zero_padded(cx, gemm.b, n, k, np, k,
                                           {ir::DimExpr::constant(np), ir::DimExpr::constant(k)})
                             : zero_padded(cx, gemm.b, k, n, k, np,
                                           {ir::DimExpr::constant(k), ir::DimExpr::constant(np)});
  if (skinny)
    for (KernelArgRef& arg : skinny->launch.args)
      if (arg.kind == KernelArgRef::Kind::kValue && arg.value == gemm.b) arg.value = b;
  gemm.b = b;
  if (gemm.bias >= 0)
    gemm.bias = zero_padded(cx, gemm.bias, 1, n, 1, np, {ir::DimExpr::constant(np)});
  const int d = gemm.d;
  const std::string name = cx.value(d).name + "/padded";
  gemm.d = cx.new_value(name, cx.dtype(d), std::move(padded_d));
  gemm.n = ir::DimExpr::constant(np);
  return d;
}

// The Cast node that alone reads D (as fold_epilogue left it), converting it to another float
// dtype of the same shape (an f16 LM head's f32 logits), or -1.
int float_cast_of(const LowerContext& cx, const GemmLaunch& gemm) {
  if (cx.is_graph_output(gemm.d)) return -1;
  const int next = cx.sole_consumer(gemm.d);
  if (next < 0) return -1;
  const ir::Node& c = cx.node(next);
  if (!c.domain.empty() || c.op != "Cast" || c.outputs.size() != 1 || c.inputs.size() != 1 ||
      c.inputs[0] != gemm.d)
    return -1;
  const DType to = cx.dtype(c.outputs[0]);
  if (!gemm_dtype(to) || to == cx.dtype(gemm.d) || cx.shape(c.outputs[0]) != cx.shape(gemm.d))
    return -1;
  return next;
}

// Emits deferred norm `norm` (-1: none) and the GEMM's steps: its skinny kernel (when it has
// one), then the GEMM. The norm runs only at cuBLASLt sizes where the skinny kernel applies it.
Status emit_gemm_steps(LowerContext& cx, int i, int norm, std::optional<SkinnyLaunch> skinny,
                       const GemmLaunch& gemm) {
  if (norm >= 0)
    KILN_RETURN_IF_ERROR(emit_deferred_norm(cx, norm, skinny && skinny->norm_prologue));
  if (skinny) cx.emit(i, std::move(skinny->launch));
  cx.emit(i, gemm);
  return Status::ok_status();
}

// A Gemm's C (beta != 0). Returns true when the node is fully lowered here (the general path,
// with deferred norm `norm` before it).
Result<bool> gemm_c_operand(LowerContext& cx, int i, const ir::Node& n, GemmLaunch& gemm,
                            int norm) {
  const int c = n.inputs[2];
  const double beta = n.attr_float("beta", 1.0);
  if (beta == 0.0) return false;
  const DType dt = cx.dtype(gemm.a);
  if (bias_like(cx, c, gemm, i)) {
    if (beta == 1.0) {
      gemm.bias = c;
      return false;
    }
    if (cx.value(c).constant && dt == DType::kF32) {  // scale the constant bias at compile time
      ir::Constant scaled = *cx.value(c).constant;
      for (size_t off = 0; off + 4 <= scaled.bytes.size(); off += 4) {
        float f;
        std::memcpy(&f, &scaled.bytes[off], 4);
        f = static_cast<float>(f * beta);
        std::memcpy(&scaled.bytes[off], &f, 4);
      }
      gemm.bias =
          cx.new_value(cx.value(c).name + "/beta", DType::kF32, cx.shape(c), std::move(scaled));
      return false;
    }
  }
  if (addend_like(cx, c, gemm, i)) {  // C with D's shape: cuBLASLt's own beta·C
    gemm.c = c;
    gemm.beta = static_cast<float>(beta);
    return false;
  }
  // General (broadcast) C: D = GEMM, then out = D + beta * C in a kernel.
  gemm.d = cx.new_value(n.name + "/gemm", dt, cx.shape(n.outputs[0]));
  gemm.epilogue = Epilogue::kNone;
  gemm.a = cx.resolve(gemm.a);
  gemm.b = cx.resolve(gemm.b);
  KILN_RETURN_IF_ERROR(emit_gemm_steps(cx, i, norm, std::nullopt, gemm));
  EwGroup group;
  group.inputs = {cx.shape(gemm.d), cx.shape(c)};
  group.out_shape = cx.shape(n.outputs[0]);
  group.ops = {{"mul", {EwOperand::input(1), EwOperand::constant(static_cast<float>(beta))}},
               {"add", {EwOperand::input(0), EwOperand::temp(0)}}};
  group.outputs = {1};
  KILN_RETURN_IF_ERROR(emit_elementwise(cx, i, group, {gemm.d, c}, {n.outputs[0]}, n.name));
  return true;
}

// The reduction axis must not depend on the size: padding rows would enter real sums.
Status require_constant_k(const ir::Node& n, const GemmLaunch& gemm) {
  if (gemm.k.is_constant()) return Status::ok_status();
  return invalid_argument(
      fmt::format("{}: the size dimension reaches the reduction axis K = {}; padded requests "
                  "would mix padding rows into real results",
                  lower_error_prefix(n), gemm.k.to_string()));
}

Status lower_gemm(LowerContext& cx, int i) {
  const ir::Node n = cx.node(i);  // copy: new_value may grow the graph
  if (n.inputs.size() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0 || n.outputs.empty())
    return lower_unsupported(n, "expects two operands and one result");
  KILN_ASSIGN_OR_RETURN(DType dt, require_data_dtype(cx, n));
  (void)dt;
  GemmLaunch gemm;
  gemm.a = n.inputs[0];
  gemm.b = n.inputs[1];
  gemm.d = n.outputs[0];
  gemm.nodes = n.name;
  KILN_RETURN_IF_ERROR(gemm_shapes(cx, n, gemm));
  KILN_RETURN_IF_ERROR(require_constant_k(n, gemm));
  const int norm = cx.take_deferred_norm(cx.resolve(n.inputs[0]));

  if (n.op == "Gemm" && n.inputs.size() > 2 && n.inputs[2] >= 0) {
    KILN_ASSIGN_OR_RETURN(bool lowered, gemm_c_operand(cx, i, n, gemm, norm));
    if (lowered) return Status::ok_status();
  }
  fold_epilogue(cx, i, gemm);
  const int cast = float_cast_of(cx, gemm);
  gemm.a = cx.resolve(gemm.a);
  gemm.b = cx.resolve(gemm.b);
  gemm.d = cx.resolve(gemm.d);
  if (gemm.bias >= 0) gemm.bias = cx.resolve(gemm.bias);
  if (gemm.c >= 0) gemm.c = cx.resolve(gemm.c);
  std::optional<SkinnyLaunch> no_skinny;
  KILN_ASSIGN_OR_RETURN(std::optional<SkinnyNorm> prologue, norm_prologue(cx, norm));
  const int64_t cols = gemm.n.offset;
  // "Padded rows" with a Cast after D: padded before the skinny kernel, which then computes the
  // padded rows too, and one copy at every size both unpads and converts.
  const int unpadded_cast = cast >= 0 ? pad_gemm_n(cx, i, gemm, no_skinny) : -1;
  std::optional<SkinnyLaunch> skinny =
      skinny_gemm_launch(cx, i, gemm, prologue ? &*prologue : nullptr);
  const int unpadded = unpadded_cast >= 0 ? -1 : pad_gemm_n(cx, i, gemm, skinny);
  KILN_RETURN_IF_ERROR(emit_gemm_steps(cx, i, norm, std::move(skinny), gemm));
  if (unpadded_cast >= 0) {
    const ir::Node c = cx.node(cast);
    cx.mark_done(cast);
    return emit_gemm_unpad(cx, i, gemm.d, c.outputs[0], gemm.m, cols, gemm.n.offset, false,
                           gemm.nodes + "+" + c.name + " (unpad)");
  }
  if (unpadded < 0) return Status::ok_status();
  return emit_gemm_unpad(cx, i, gemm.d, unpadded, gemm.m, cols, gemm.n.offset, true,
                         gemm.nodes + " (unpad)");
}

Result<GateAct> gate_act(const ir::Node& n) {
  const std::string act = n.attr_string("activation", "");
  if (act == "silu") return GateAct::kSilu;
  if (act == "gelu") return GateAct::kGelu;
  if (act == "gelu_tanh") return GateAct::kGeluTanh;
  if (act == "relu") return GateAct::kRelu;
  return lower_unsupported(n, fmt::format("activation '{}'", act));
}

// kiln.GatedMatMul: the GEMM of X and the interleaved weight into a [M, 2N] product, then the
// gating kernel (gated_pairs) into the output. At the sizes where a skinny kernel computes the
// GEMM, that kernel writes the gated output itself and both other steps are skipped: one launch.
Status lower_gated_matmul(LowerContext& cx, int i) {
  const ir::Node n = cx.node(i);  // copy: new_value may grow the graph
  if (n.inputs.size() != 2 || n.inputs[0] < 0 || n.inputs[1] < 0 || n.outputs.size() != 1)
    return lower_unsupported(n, "expects X, W and one result");
  KILN_ASSIGN_OR_RETURN(DType dt, require_data_dtype(cx, n));
  KILN_ASSIGN_OR_RETURN(GateAct act, gate_act(n));
  if (cx.rank(n.inputs[1]) != 2) return lower_unsupported(n, "W must be 2-D");
  GemmLaunch gemm;
  gemm.a = n.inputs[0];
  gemm.b = n.inputs[1];
  gemm.nodes = n.name;
  KILN_RETURN_IF_ERROR(gemm_shapes(cx, n, gemm));  // as MatMul(X, W): [M, K] x [K, 2N]
  KILN_RETURN_IF_ERROR(require_constant_k(n, gemm));
  const int norm = cx.take_deferred_norm(cx.resolve(n.inputs[0]));
  ir::Shape product = cx.shape(n.outputs[0]);
  product.back() = gemm.n;
  gemm.d = cx.new_value(n.name + "/product", dt, product);
  gemm.a = cx.resolve(gemm.a);
  gemm.b = cx.resolve(gemm.b);
  const int out = cx.resolve(n.outputs[0]);
  KILN_ASSIGN_OR_RETURN(std::optional<SkinnyNorm> prologue, norm_prologue(cx, norm));
  std::optional<SkinnyLaunch> skinny =
      skinny_gemm_launch_gated(cx, i, gemm, act, out, prologue ? &*prologue : nullptr);
  KILN_RETURN_IF_ERROR(emit_gemm_steps(cx, i, norm, std::move(skinny), gemm));

  const int64_t half = gemm.n.offset / 2;
  const int vec = gated_pairs_vec(dt, half);
  auto outputs = ir::dim_mul(gemm.m, ir::DimExpr::constant(half));
  auto threads = ir::dim_mul(gemm.m, ir::DimExpr::constant(half / vec));
  if (!outputs || !threads) return lower_unsupported(n, "the output's size is not linear in S");
  KernelLaunch pairs;
  pairs.kernel = cx.add_kernel("kiln_gated_pairs", codegen_gated_pairs(dt, act, *outputs, vec));
  pairs.args = {KernelArgRef::tensor(gemm.d), KernelArgRef::tensor(out), KernelArgRef::size()};
  pairs.work = *threads;
  pairs.work_per_block = kGatedPairsBlock;
  pairs.block = kGatedPairsBlock;
  pairs.nodes = n.name + " (gating)";
  // Other block sizes for the autotuner, which then also has the launch's time: the GEMM tuner
  // counts it on cuBLASLt's side where a skinny kernel applies the gating itself.
  pairs.config = fmt::format("block={}", kGatedPairsBlock);
  for (uint32_t block : kGatedPairsBlockCandidates) {
    LaunchCandidate c;
    c.config = fmt::format("block={}", block);
    c.def = codegen_gated_pairs(dt, act, *outputs, vec, block);
    c.work = *threads;
    c.work_per_block = block;
    c.block = block;
    pairs.candidates.push_back(std::move(c));
  }
  pairs.after_cublaslt = !gemm.skinny_sizes.empty();
  cx.emit(i, std::move(pairs));
  return Status::ok_status();
}

}  // namespace

std::vector<LowerRule> gemm_rules() {
  return {{"MatMul", lower_gemm}, {"Gemm", lower_gemm}, {"kiln.GatedMatMul", lower_gated_matmul}};
}

}  // namespace kiln::compiler
