#include "tests/support/gemm_models.h"

#include <cmath>
#include <random>

namespace kiln::testing {

using compiler::Precision;

std::vector<float> eighths(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(-8, 8);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(d(rng)) / 8.0f;
  return v;
}

int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// The element type of a model checked under precision `p`.
int model_elem(Precision p) {
  if (p == Precision::kF16) return onnx::TensorProto::FLOAT16;
  if (p == Precision::kBF16) return onnx::TensorProto::BFLOAT16;
  return onnx::TensorProto::FLOAT;
}

// GELU in GPT-2's tanh form, in f32 (a 16-bit model casts around it, as exporters do with
// mixed precision); fuse_gelu makes it one Gelu(approximate = "tanh") before precision lowering
// turns the casts into no-ops.
void gelu_tanh(GemmModel& b, const std::string& x, const std::string& y) {
  std::vector<std::pair<std::string, Attr>> to_f32, to_elem;
  to_f32.emplace_back("to", Attr(int64_t{onnx::TensorProto::FLOAT}));
  to_elem.emplace_back("to", Attr(int64_t{b.elem()}));
  const std::string in = b.is_f32() ? x : "g_x32", out = b.is_f32() ? y : "g_y32";
  if (!b.is_f32()) b.node("Cast", {x}, {in}, to_f32);
  b.f32_constant("g_half", {}, {0.5f})
      .f32_constant("g_three", {}, {3.0f})
      .f32_constant("g_c2", {}, {0.044715f})
      .f32_constant("g_c1", {}, {0.7978845608f})
      .f32_constant("g_one", {}, {1.0f})
      .node("Mul", {in, "g_half"}, {"g_hx"})
      .node("Pow", {in, "g_three"}, {"g_p"})
      .node("Mul", {"g_p", "g_c2"}, {"g_pc"})
      .node("Add", {in, "g_pc"}, {"g_inner"})
      .node("Mul", {"g_inner", "g_c1"}, {"g_z"})
      .node("Tanh", {"g_z"}, {"g_th"})
      .node("Add", {"g_th", "g_one"}, {"g_t"})
      .node("Mul", {"g_hx", "g_t"}, {out});
  if (!b.is_f32()) b.node("Cast", {out}, {y}, to_elem);
}

const char* epi_name(Epi e) {
  switch (e) {
    case Epi::kNone:
      return "none";
    case Epi::kBias:
      return "bias";
    case Epi::kBiasRelu:
      return "bias+relu";
    case Epi::kBiasGelu:
      return "bias+gelu";
    case Epi::kBiasResidual:
      return "bias+residual";
    case Epi::kResidualBiasRelu:
      return "residual+bias+relu";
  }
  return "?";
}

// y[S, N] = epilogue(x[S, K] @ w[K, N]). The residual exists before the GEMM (as in a
// transformer), so it can be the GEMM's C.
OnnxBuilder dense_model(Epi e, int64_t k, int64_t n, Precision p) {
  GemmModel b("gemm_" + std::string(epi_name(e)), p);
  b.activation("x", {k}, 11);
  if (e == Epi::kBiasResidual || e == Epi::kResidualBiasRelu) b.activation("r", {n}, 14);
  b.weight("w", {k, n}, 12).weight("bias", {n}, 13);
  b.node("MatMul", {"x", "w"}, {e == Epi::kNone ? "y" : "h"});
  switch (e) {
    case Epi::kNone:
      break;
    case Epi::kBias:
      b.node("Add", {"h", "bias"}, {"y"});
      break;
    case Epi::kBiasRelu:
      b.node("Add", {"bias", "h"}, {"hb"}).node("Relu", {"hb"}, {"y"});
      break;
    case Epi::kBiasGelu:
      b.node("Add", {"h", "bias"}, {"hb"});
      gelu_tanh(b, "hb", "y");
      break;
    case Epi::kBiasResidual:
      b.node("Add", {"h", "bias"}, {"hb"}).node("Add", {"r", "hb"}, {"y"});
      break;
    case Epi::kResidualBiasRelu:
      b.node("Add", {"h", "r"}, {"hr"}).node("Add", {"hr", "bias"}, {"hb"});
      b.node("Relu", {"hb"}, {"y"});
      break;
  }
  return b.finish("y");
}

OnnxBuilder gated_mlp_model(bool silu, int64_t k, int64_t n, Precision p) {
  GemmModel b(silu ? "gated_silu" : "gated_relu", p);
  b.activation("x", {k}, 31).weight("wg", {k, n}, 32).weight("wu", {k, n}, 33);
  b.node("MatMul", {"x", "wg"}, {"g"}).node("MatMul", {"x", "wu"}, {"u"});
  if (silu)
    b.node("Sigmoid", {"g"}, {"s"}).node("Mul", {"g", "s"}, {"a"});
  else
    b.node("Relu", {"g"}, {"a"});
  b.node("Mul", {"a", "u"}, {"y"});
  return b.finish("y");
}

const char* norm_kind_name(NormKind n) {
  switch (n) {
    case NormKind::kRms:
      return "rmsnorm";
    case NormKind::kLayer:
      return "layernorm";
    case NormKind::kLayerBias:
      return "layernorm+bias";
  }
  return "?";
}

OnnxBuilder norm_gemm_model(NormKind norm, bool gated, int64_t k, int64_t n, Precision p) {
  GemmModel b(std::string("norm_") + norm_kind_name(norm), p, 23);
  b.activation("x", {k}, 41).weight("scale", {k}, 42);
  if (norm == NormKind::kRms) {
    b.node("RMSNormalization", {"x", "scale"}, {"h"});
  } else {
    std::vector<std::string> in = {"x", "scale"};
    if (norm == NormKind::kLayerBias) {
      b.weight("shift", {k}, 43);
      in.push_back("shift");
    }
    b.node("LayerNormalization", in, {"h"});
  }
  if (gated) {
    b.weight("wg", {k, n}, 44).weight("wu", {k, n}, 45);
    b.node("MatMul", {"h", "wg"}, {"g"}).node("MatMul", {"h", "wu"}, {"u"});
    b.node("Sigmoid", {"g"}, {"s"}).node("Mul", {"g", "s"}, {"a"}).node("Mul", {"a", "u"}, {"y"});
  } else {
    b.weight("w", {k, n}, 46).weight("b", {n}, 47);
    b.node("MatMul", {"h", "w"}, {"t"}).node("Add", {"t", "b"}, {"y"});
  }
  return b.finish("y");
}

compiler::Tolerance norm_gemm_tolerance(Precision p, int64_t k, bool gated) {
  const double u = p == Precision::kBF16 ? 0x1p-8 : p == Precision::kF32 ? 0x1p-20 : 0x1p-11;
  const double root_k = std::sqrt(static_cast<double>(k));
  compiler::Tolerance t = compiler::tolerance_gemm(p, k);
  t.atol += 3.0 * root_k * u * (gated ? root_k : 1.0);
  return t;
}

GpuCheck gemm_check(Precision p, int64_t k) {
  GpuCheck c = gpu_check(p, {1, 3, 17, 1000});
  c.tol = compiler::tolerance_gemm(p, k);
  c.tol_set = true;
  c.int_high = kGemmVocab;
  return c;
}

}  // namespace kiln::testing
