// Op family: matrix products. MatMul (numpy semantics: 1-D operands, batch broadcasting), Gemm
// (alpha·op(A)·op(B) + beta·C, C broadcast to [M, N]) and kiln.GatedMatMul (act(X·Wg) · (X·Wu)
// over one weight of interleaved column pairs; compiler/ops/kiln_ops.md). Float dtypes only;
// integer MatMul is not supported.
#include <fmt/format.h>

#include <cmath>
#include <numbers>
#include <optional>
#include <string>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

// Every present input is a float dtype, the same for all.
Status check_float_inputs(const InferContext& c) {
  const ir::Value& a = c.input(0);
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    const ir::Value& v = c.input(i);
    if (!dtype_is_float(v.dtype))
      return c.unsupported(fmt::format("input '{}' is {}; kiln supports f32, f16, bf16, f64",
                                       v.name, dtype_name(v.dtype)));
    if (v.dtype != a.dtype)
      return c.error(fmt::format("inputs '{}' ({}) and '{}' ({}) differ in dtype", a.name,
                                 dtype_name(a.dtype), v.name, dtype_name(v.dtype)));
  }
  return Status::ok_status();
}

// --- MatMul ------------------------------------------------------------------------------------

Status infer_matmul(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_float_inputs(c));
  const ir::Value &av = c.input(0), &bv = c.input(1);
  ir::Shape a = av.shape, b = bv.shape;
  if (a.empty() || b.empty())
    return c.error(fmt::format("inputs must have rank >= 1, got {} and {}", ir::shape_to_string(a),
                               ir::shape_to_string(b)));
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), ir::DimExpr::constant(1));
  if (b_vec) b.push_back(ir::DimExpr::constant(1));
  const ir::DimExpr ka = a.back(), kb = b[b.size() - 2];
  if (ka != kb)
    return c.error(fmt::format("inner dims {} and {} differ (shapes {} and {})", ka.to_string(),
                               kb.to_string(), ir::shape_to_string(av.shape),
                               ir::shape_to_string(bv.shape)));
  KILN_ASSIGN_OR_RETURN(ir::Shape out, shape_broadcast(c, ir::Shape(a.begin(), a.end() - 2),
                                                       ir::Shape(b.begin(), b.end() - 2)));
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b.back());
  c.set_output(0, av.dtype, std::move(out));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_matmul(const ir::Node&,
                                          const std::vector<const RefTensor*>& in) {
  if (in.size() != 2 || !in[0] || !in[1]) return invalid_argument("MatMul takes two inputs");
  KILN_RETURN_IF_ERROR(ref_check_data(in));
  const RefTensor &a = *in[0], &b = *in[1];
  if (a.dims.empty() || b.dims.empty())
    return invalid_argument(
        fmt::format("rank 0 operand: {} and {}", dims_to_string(a.dims), dims_to_string(b.dims)));
  std::vector<int64_t> ad = a.dims, bd = b.dims;
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), k2 = bd[bd.size() - 2], n = bd.back();
  if (k != k2)
    return invalid_argument(fmt::format("inner dims of {} and {} differ", dims_to_string(a.dims),
                                        dims_to_string(b.dims)));
  const std::vector<int64_t> a_batch(ad.begin(), ad.end() - 2), b_batch(bd.begin(), bd.end() - 2);
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> batch,
                        ref_broadcast_dims(a_batch, b_batch, "batch dims"));
  // Which matrix of a and of b each output matrix reads.
  const std::vector<int64_t> ai = ref_broadcast_index(batch, a_batch);
  const std::vector<int64_t> bi = ref_broadcast_index(batch, b_batch);
  std::vector<int64_t> out_dims = batch;
  if (!a_vec) out_dims.push_back(m);
  if (!b_vec) out_dims.push_back(n);
  RefTensor out = ref_make(a.dtype, out_dims);
  for (size_t t = 0; t < ai.size(); ++t) {
    const double* pa = a.data.data() + ai[t] * m * k;
    const double* pb = b.data.data() + bi[t] * k * n;
    double* po = out.data.data() + static_cast<int64_t>(t) * m * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0.0;
        for (int64_t p = 0; p < k; ++p) acc += pa[i * k + p] * pb[p * n + j];
        po[i * n + j] = acc;
      }
  }
  return std::vector<RefTensor>{std::move(out)};
}

// --- Gemm --------------------------------------------------------------------------------------

// C broadcasts one way to [M, N].
bool c_broadcasts(const ir::Shape& c, const ir::Shape& target) {
  if (c.size() > 2) return false;
  for (size_t i = 0; i < c.size(); ++i) {
    const ir::DimExpr& t = target[2 - c.size() + i];
    if (c[i] != t && c[i] != ir::DimExpr::constant(1)) return false;
  }
  return true;
}

Status infer_gemm(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 3, 1, 1));
  KILN_RETURN_IF_ERROR(check_float_inputs(c));
  const ir::Shape &a = c.input(0).shape, &b = c.input(1).shape;
  if (a.size() != 2 || b.size() != 2)
    return c.error(fmt::format("A and B must be 2-D, got {} and {}", ir::shape_to_string(a),
                               ir::shape_to_string(b)));
  const bool ta = c.node().attr_int("transA", 0) != 0, tb = c.node().attr_int("transB", 0) != 0;
  const ir::DimExpr m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  const ir::DimExpr kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (ka != kb)
    return c.error(fmt::format("inner dims {} and {} differ (A {}, B {}, transA={}, transB={})",
                               ka.to_string(), kb.to_string(), ir::shape_to_string(a),
                               ir::shape_to_string(b), ta ? 1 : 0, tb ? 1 : 0));
  const ir::Shape target = {m, n};
  if (c.has_input(2) && !c_broadcasts(c.input(2).shape, target))
    return c.error(fmt::format("C {} does not broadcast to [M, N] = {}",
                               ir::shape_to_string(c.input(2).shape), ir::shape_to_string(target)));
  c.set_output(0, c.input(0).dtype, target);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_gemm(const ir::Node& node,
                                        const std::vector<const RefTensor*>& in) {
  if (in.size() < 2 || in.size() > 3 || !in[0] || !in[1])
    return invalid_argument("Gemm takes A, B and optional C");
  KILN_RETURN_IF_ERROR(ref_check_data(in));
  const RefTensor &a = *in[0], &b = *in[1];
  const RefTensor* c = in.size() > 2 ? in[2] : nullptr;
  if (a.dims.size() != 2 || b.dims.size() != 2)
    return invalid_argument(
        fmt::format("A {} and B {} must be 2-D", dims_to_string(a.dims), dims_to_string(b.dims)));
  const bool ta = node.attr_int("transA", 0) != 0, tb = node.attr_int("transB", 0) != 0;
  const double alpha = node.attr_float("alpha", 1.0), beta = node.attr_float("beta", 1.0);
  const int64_t m = ta ? a.dims[1] : a.dims[0], k = ta ? a.dims[0] : a.dims[1];
  const int64_t k2 = tb ? b.dims[1] : b.dims[0], n = tb ? b.dims[0] : b.dims[1];
  if (k != k2)
    return invalid_argument(fmt::format("inner dims of A {} and B {} differ",
                                        dims_to_string(a.dims), dims_to_string(b.dims)));
  RefTensor out = ref_make(a.dtype, {m, n});
  std::vector<int64_t> ci;
  if (c) {
    const bool ok = c->dims.size() <= 2 &&
                    (c->dims.size() < 1 || c->dims.back() == n || c->dims.back() == 1) &&
                    (c->dims.size() < 2 || c->dims[0] == m || c->dims[0] == 1);
    if (!ok)
      return invalid_argument(
          fmt::format("C {} does not broadcast to [{}, {}]", dims_to_string(c->dims), m, n));
    ci = ref_broadcast_index(out.dims, c->dims);
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a.data[p * m + i] : a.data[i * k + p];
        const double bv = tb ? b.data[j * k + p] : b.data[p * n + j];
        acc += av * bv;
      }
      double y = alpha * acc;
      if (c) y += beta * c->data[ci[i * n + j]];
      out.data[i * n + j] = y;
    }
  return std::vector<RefTensor>{std::move(out)};
}

// --- kiln.GatedMatMul --------------------------------------------------------------------------

// The gate's activation, by the `activation` attribute; nullopt for an unknown name.
std::optional<double (*)(double)> gate_activation(const std::string& name) {
  if (name == "silu") return [](double x) { return x / (1.0 + std::exp(-x)); };
  if (name == "gelu")
    return [](double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); };
  if (name == "gelu_tanh")
    return [](double x) {
      const double k = std::sqrt(2.0 / std::numbers::pi);
      return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
    };
  if (name == "relu") return [](double x) { return x < 0.0 ? 0.0 : x; };
  return std::nullopt;
}

Status infer_gated_matmul(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_float_inputs(c));
  const std::string act = c.node().attr_string("activation", "");
  if (!gate_activation(act))
    return c.error(fmt::format("activation '{}' is not one of silu, gelu, gelu_tanh, relu", act));
  const ir::Shape &x = c.input(0).shape, &w = c.input(1).shape;
  if (x.empty() || w.size() != 2)
    return c.error(fmt::format("X must have rank >= 1 and W rank 2, got {} and {}",
                               ir::shape_to_string(x), ir::shape_to_string(w)));
  if (x.back() != w[0])
    return c.error(fmt::format("X's last dim {} differs from W's rows {}", x.back().to_string(),
                               w[0].to_string()));
  if (!w[1].is_constant() || w[1].offset % 2 != 0)
    return c.error(fmt::format("W's columns {} must be a constant even count (gate and up pairs)",
                               w[1].to_string()));
  ir::Shape out = x;
  out.back() = ir::DimExpr::constant(w[1].offset / 2);
  c.set_output(0, c.input(0).dtype, std::move(out));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_gated_matmul(const ir::Node& node,
                                                const std::vector<const RefTensor*>& in) {
  if (in.size() != 2 || !in[0] || !in[1]) return invalid_argument("GatedMatMul takes X and W");
  KILN_RETURN_IF_ERROR(ref_check_data(in));
  const RefTensor &x = *in[0], &w = *in[1];
  const auto act = gate_activation(node.attr_string("activation", ""));
  if (!act) return invalid_argument("GatedMatMul: unknown activation");
  if (x.dims.empty() || w.dims.size() != 2 || x.dims.back() != w.dims[0] || w.dims[1] % 2 != 0)
    return invalid_argument(
        fmt::format("X {} and W {} do not fit", dims_to_string(x.dims), dims_to_string(w.dims)));
  const int64_t k = w.dims[0], n = w.dims[1] / 2;
  std::vector<int64_t> out_dims = x.dims;
  out_dims.back() = n;
  RefTensor out = ref_make(x.dtype, out_dims);
  const int64_t rows = k == 0 ? 0 : static_cast<int64_t>(x.data.size()) / k;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double gate = 0.0, up = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        gate += x.data[i * k + p] * w.data[p * 2 * n + 2 * j];
        up += x.data[i * k + p] * w.data[p * 2 * n + 2 * j + 1];
      }
      out.data[i * n + j] = (*act)(gate)*up;
    }
  return std::vector<RefTensor>{std::move(out)};
}

}  // namespace

void ops_register_matmul(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "MatMul", infer_matmul, ref_matmul});
  defs.push_back({kDomainOnnx, "Gemm", infer_gemm, ref_gemm});
  defs.push_back({kDomainKiln, "GatedMatMul", infer_gated_matmul, ref_gated_matmul});
}

}  // namespace kiln::compiler
