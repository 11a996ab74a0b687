// GEMM family: MatMul and Gemm → cuBLASLt steps, with a following bias Add and Relu folded into
// the epilogue. (Starting point moved from lowering.cc; see lower_rules.h for the target.)
#include <fmt/format.h>

#include <cstring>

#include "compiler/lower/elementwise_codegen.h"
#include "compiler/lower/lower_rules.h"

namespace kiln::compiler {
namespace {

bool is_f32(const LowerContext& cx, int v) { return cx.dtype(v) == DType::kF32; }

Status require_f32(const LowerContext& cx, const ir::Node& n) {
  for (int v : n.inputs)
    if (v >= 0 && !is_f32(cx, v))
      return lower_unsupported(n, fmt::format("tensor '{}' is {}; only f32 is supported",
                                              cx.value(v).name, dtype_name(cx.dtype(v))));
  return Status();
}

// A bias-like operand for an epilogue: shape [N] or [1, N], available before the GEMM.
bool bias_like(const LowerContext& cx, int v, const ir::DimExpr& n, int gemm_node) {
  const ir::Shape& s = cx.shape(v);
  bool fits = (s.size() == 1 && s[0] == n) ||
              (s.size() == 2 && s[0] == ir::DimExpr::constant(1) && s[1] == n);
  return fits && is_f32(cx, v) && cx.available_at(v, gemm_node);
}

// Folds a following bias Add and/or Relu into the GEMM's epilogue.
void fold_epilogue(LowerContext& cx, int gemm_node, GemmLaunch& gemm) {
  if (gemm.batch != ir::DimExpr::constant(1)) return;
  int next = cx.sole_consumer(gemm.d);
  if (gemm.bias < 0 && next >= 0 && cx.node(next).op == "Add") {
    const ir::Node& add = cx.node(next);
    int other = add.inputs[0] == gemm.d ? add.inputs[1] : add.inputs[0];
    if (add.inputs[0] != add.inputs[1] && cx.shape(add.outputs[0]) == cx.shape(gemm.d) &&
        bias_like(cx, other, gemm.n, gemm_node)) {
      gemm.bias = other;
      gemm.d = add.outputs[0];
      gemm.nodes += "+" + add.name;
      gemm.epilogue = Epilogue::kBias;
      cx.mark_done(next);
      next = cx.sole_consumer(gemm.d);
    }
  }
  if (next >= 0 && cx.node(next).op == "Relu") {
    gemm.d = cx.node(next).outputs[0];
    gemm.nodes += "+" + cx.node(next).name;
    gemm.epilogue = gemm.bias >= 0 ? Epilogue::kBiasRelu : Epilogue::kRelu;
    cx.mark_done(next);
  }
}

Status lower_gemm(LowerContext& cx, int i) {
  const ir::Node n = cx.node(i);  // copy: new_value may grow the graph
  KILN_RETURN_IF_ERROR(require_f32(cx, n));
  const ir::Shape a = cx.shape(n.inputs[0]), b = cx.shape(n.inputs[1]);
  GemmLaunch gemm;
  gemm.a = n.inputs[0];
  gemm.b = n.inputs[1];
  gemm.d = n.outputs[0];
  gemm.nodes = n.name;
  if (a.size() < 2 || b.size() < 2) return lower_unsupported(n, "1-D operands are not supported yet");
  if (n.op == "Gemm") {
    gemm.trans_a = n.attr_int("transA", 0) != 0;
    gemm.trans_b = n.attr_int("transB", 0) != 0;
    gemm.alpha = static_cast<float>(n.attr_float("alpha", 1.0));
    gemm.m = gemm.trans_a ? a[1] : a[0];
    gemm.k = gemm.trans_a ? a[0] : a[1];
    gemm.n = gemm.trans_b ? b[0] : b[1];
  } else if (b.size() == 2) {  // [..., M, K] @ [K, N]: fold leading dims into M
    ir::Shape lead(a.begin(), a.end() - 1);
    auto m = ir::shape_numel(lead);
    if (!m)
      return lower_unsupported(
          n, fmt::format("M = {} is not linear in the size", ir::shape_to_string(lead)));
    gemm.m = *m;
    gemm.k = a.back();
    gemm.n = b[1];
  } else {  // batched: equal batch dims, or A's broadcast over B's
    ir::Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    auto a_batch = ir::shape_numel(ab), b_batch = ir::shape_numel(bb);
    if (!a_batch || !b_batch || (ab != bb && *a_batch != ir::DimExpr::constant(1)))
      return lower_unsupported(
          n, fmt::format("batch dims {} and {} must be equal (or A's all 1)",
                         ir::shape_to_string(ab), ir::shape_to_string(bb)));
    gemm.m = a[a.size() - 2];
    gemm.k = a.back();
    gemm.n = b.back();
    gemm.batch = *b_batch;
    auto mk = ir::dim_mul(gemm.m, gemm.k), kn = ir::dim_mul(gemm.k, gemm.n),
         mn = ir::dim_mul(gemm.m, gemm.n);
    if (!mk || !kn || !mn) return lower_unsupported(n, "strides not linear in the size");
    gemm.stride_a = ab == bb ? *mk : ir::DimExpr::constant(0);
    gemm.stride_b = *kn;
    gemm.stride_d = *mn;
  }
  if (!gemm.k.is_constant())
    return invalid_argument(fmt::format(
        "{}: the size dimension reaches the reduction axis K = {}; padded requests "
        "would mix padding rows into real results",
        lower_error_prefix(n), gemm.k.to_string()));

  if (n.op == "Gemm" && n.inputs.size() > 2 && n.inputs[2] >= 0) {
    const int c = n.inputs[2];
    const double beta = n.attr_float("beta", 1.0);
    if (beta != 0.0 && bias_like(cx, c, gemm.n, i)) {
      gemm.bias = c;
      if (beta != 1.0 && cx.value(c).constant) {  // scale the constant bias at compile time
        ir::Constant scaled = *cx.value(c).constant;
        for (size_t off = 0; off + 4 <= scaled.bytes.size(); off += 4) {
          float f;
          std::memcpy(&f, &scaled.bytes[off], 4);
          f = static_cast<float>(f * beta);
          std::memcpy(&scaled.bytes[off], &f, 4);
        }
        gemm.bias = cx.new_value(cx.value(c).name + "/beta", DType::kF32, cx.shape(c),
                                 std::move(scaled));
      } else if (beta != 1.0) {
        gemm.bias = -1;
      }
    }
    if (beta != 0.0 && gemm.bias < 0) {  // general C: D = GEMM, then out = D + beta * C
      gemm.d = cx.new_value(n.name + "/gemm", DType::kF32, cx.shape(n.outputs[0]));
      gemm.epilogue = Epilogue::kNone;
      cx.emit(i, gemm);
      EwGroup group;
      group.inputs = {cx.shape(gemm.d), cx.shape(c)};
      group.out_shape = cx.shape(n.outputs[0]);
      group.ops = {{"mul", {EwOperand::input(1), EwOperand::constant(static_cast<float>(beta))}},
                   {"add", {EwOperand::input(0), EwOperand::temp(0)}}};
      group.outputs = {1};
      return emit_elementwise(cx, i, group, {gemm.d, c}, {n.outputs[0]}, n.name);
    }
  }
  if (gemm.bias >= 0) gemm.epilogue = Epilogue::kBias;
  fold_epilogue(cx, i, gemm);
  gemm.a = cx.resolve(gemm.a);
  gemm.b = cx.resolve(gemm.b);
  gemm.d = cx.resolve(gemm.d);
  if (gemm.bias >= 0) gemm.bias = cx.resolve(gemm.bias);
  cx.emit(i, gemm);
  return Status();
}

}  // namespace

std::vector<LowerRule> gemm_rules() { return {{"MatMul", lower_gemm}, {"Gemm", lower_gemm}}; }

}  // namespace kiln::compiler
