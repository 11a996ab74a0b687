// Op family: rotary. kiln.Rotary (compiler/ops/kiln_ops.md), ONNX RotaryEmbedding (opset 23) and
// com.microsoft RotaryEmbedding. Every form rotates pairs of the first R elements of each head:
// (a, b) → (a·cos − b·sin, b·cos + a·sin), pairs taken as halves (x[i], x[i + R/2]) or, when
// interleaved, neighbours (x[2i], x[2i+1]); elements from R on pass through.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/ir/op_registry.h"
#include "compiler/ops/attention_ref.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

// y = x with its first R elements rotated. `full`: cos/sin hold R entries (Hugging Face's
// cat(freqs, freqs) table) instead of R/2.
void rotate_row(const double* x, double* y, int64_t D, const double* cos, const double* sin,
                int64_t R, bool interleaved, bool full) {
  std::copy(x, x + D, y);
  const int64_t half = R / 2;
  if (full) {
    for (int64_t i = 0; i < R; ++i) {
      const double r = i < half ? -x[i + half] : x[i - half];
      y[i] = x[i] * cos[i] + r * sin[i];
    }
    return;
  }
  for (int64_t i = 0; i < half; ++i) {
    const int64_t ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
    const double a = x[ia], b = x[ib];
    y[ia] = a * cos[i] - b * sin[i];
    y[ib] = b * cos[i] + a * sin[i];
  }
}

// Checks an input against X's dtype.
Status check_same_dtype(const InferContext& c, size_t i) {
  if (c.input(i).dtype == c.input(0).dtype) return Status::ok_status();
  return c.error(fmt::format("input '{}' is {}, X is {}", c.input(i).name,
                             dtype_name(c.input(i).dtype), dtype_name(c.input(0).dtype)));
}

// rotary_dim (0 = D) against the head size D: even and <= D.
Result<int64_t> rotary_dim(const InferContext& c, const char* attr, const ir::DimExpr& d) {
  if (!d.is_constant()) return c.error(fmt::format("head size {} must be constant", d.to_string()));
  const int64_t r = c.node().attr_int(attr, 0);
  const int64_t R = r == 0 ? d.offset : r;
  if (R <= 0 || R % 2 != 0 || R > d.offset)
    return c.error(fmt::format("{} {} must be even, positive and at most the head size {}", attr, R,
                               d.offset));
  return R;
}

Status check_interleaved(const InferContext& c) {
  const int64_t v = c.node().attr_int("interleaved", 0);
  if (v == 0 || v == 1) return Status::ok_status();
  return c.error(fmt::format("attribute 'interleaved' must be 0 or 1, got {}", v));
}

// --- kiln.Rotary ---------------------------------------------------------------------------------

Status infer_kiln_rotary(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 3, 1, 1));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "X"));
  const ir::Shape& x = c.input(0).shape;
  if (x.empty()) return c.error("X must have at least one dim");
  KILN_RETURN_IF_ERROR(infer_rotary_tables(c, 1, x));
  c.set_output(0, c.input(0).dtype, x);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_kiln_rotary(const ir::Node& n,
                                               const std::vector<const RefTensor*>& in) {
  if (in.size() < 3 || !in[0] || !in[1] || !in[2])
    return invalid_argument("kiln.Rotary needs X, cos and sin");
  KILN_ASSIGN_OR_RETURN(RefTensor y, ref_rotary(*in[0], *in[1], *in[2], n.attr_int("rotary_dim", 0),
                                                n.attr_int("interleaved", 0) != 0));
  return std::vector<RefTensor>{std::move(y)};
}

}  // namespace

Status infer_rotary_tables(InferContext& c, size_t cos_in, const ir::Shape& x) {
  KILN_RETURN_IF_ERROR(check_same_dtype(c, cos_in));
  KILN_RETURN_IF_ERROR(check_same_dtype(c, cos_in + 1));
  KILN_RETURN_IF_ERROR(check_interleaved(c));
  const ir::Shape& cs = c.input(cos_in).shape;
  KILN_ASSIGN_OR_RETURN(int64_t R, rotary_dim(c, "rotary_dim", x.back()));
  if (c.input(cos_in + 1).shape != cs)
    return c.error(fmt::format("sin {} and cos {} differ",
                               ir::shape_to_string(c.input(cos_in + 1).shape),
                               ir::shape_to_string(cs)));
  if (cs.empty() || cs.size() > x.size())
    return c.error(fmt::format("cos {} must have rank 1 to {} (X is {})", ir::shape_to_string(cs),
                               x.size(), ir::shape_to_string(x)));
  const ir::DimExpr last = cs.back();
  const bool full = last == ir::DimExpr::constant(R);
  if (last != ir::DimExpr::constant(R / 2) && !full)
    return c.error(fmt::format("cos's last dim {} must be rotary_dim/2 = {} or rotary_dim = {}",
                               last.to_string(), R / 2, R));
  if (full && c.node().attr_int("interleaved", 0) != 0)
    return c.error("a full-width cos/sin table cannot be interleaved");
  return infer_check_broadcast(c, ir::Shape(cs.begin(), cs.end() - 1),
                               ir::Shape(x.begin(), x.end() - 1), "cos/sin");
}

Result<RefTensor> ref_rotary(const RefTensor& x, const RefTensor& cos, const RefTensor& sin,
                             int64_t rotary_dim, bool interleaved) {
  if (x.dims.empty() || cos.dims.empty() || cos.dims.size() > x.dims.size() || sin.dims != cos.dims)
    return invalid_argument(fmt::format("kiln.Rotary: X {}, cos {}, sin {} do not fit",
                                        dims_to_string(x.dims), dims_to_string(cos.dims),
                                        dims_to_string(sin.dims)));
  const int64_t D = x.dims.back(), C = cos.dims.back();
  const int64_t R = rotary_dim == 0 ? D : rotary_dim;
  const bool full = C == R && C != R / 2;
  if (R <= 0 || R % 2 != 0 || R > D || (C != R / 2 && !full))
    return invalid_argument(fmt::format("kiln.Rotary: rotary_dim {} does not fit X {} and cos {}",
                                        R, dims_to_string(x.dims), dims_to_string(cos.dims)));
  const std::vector<int64_t> lead(x.dims.begin(), x.dims.end() - 1);
  const std::vector<int64_t> clead(cos.dims.begin(), cos.dims.end() - 1);
  for (size_t i = 0; i < clead.size(); ++i) {
    const int64_t want = lead[lead.size() - clead.size() + i];
    if (clead[i] != want && clead[i] != 1)
      return invalid_argument(fmt::format("kiln.Rotary: cos {} does not broadcast to X {}",
                                          dims_to_string(cos.dims), dims_to_string(x.dims)));
  }
  const std::vector<int64_t> rows = ref_broadcast_index(lead, clead);
  RefTensor y = ref_make(x.dtype, x.dims);
  for (size_t r = 0; r < rows.size(); ++r)
    rotate_row(&x.data[r * D], &y.data[r * D], D, &cos.data[rows[r] * C], &sin.data[rows[r] * C], R,
               interleaved, full);
  return y;
}

namespace {

// --- shared by the ONNX and com.microsoft forms -------------------------------------------------

// X as [B, S, H·D] (heads_first = false) or [B, H, S, D]; cos/sin as rows of R/2 entries, row
// rows[b·S + s] serving position s of batch b.
Result<RefTensor> rotary_heads(const RefTensor& x, bool heads_first, int64_t heads, int64_t R,
                               bool interleaved, const RefTensor& cos, const RefTensor& sin,
                               const std::vector<int64_t>& rows) {
  if (x.dims.size() != (heads_first ? 4u : 3u) || heads <= 0)
    return invalid_argument(fmt::format("rotary: X {} has the wrong rank", dims_to_string(x.dims)));
  const int64_t B = x.dims[0], S = x.dims[heads_first ? 2 : 1];
  const int64_t D = heads_first ? x.dims[3] : x.dims[2] / heads;
  const int64_t width = R / 2;
  if (D * (heads_first ? 1 : heads) != x.dims[heads_first ? 3 : 2] || R > D || R % 2 != 0 ||
      static_cast<int64_t>(rows.size()) != B * S || cos.dims != sin.dims || cos.dims.empty() ||
      width <= 0 || cos.dims.back() != width)
    return invalid_argument(fmt::format(
        "rotary: X {}, cos {}, sin {} do not fit {} heads and "
        "rotary dim {}",
        dims_to_string(x.dims), dims_to_string(cos.dims), dims_to_string(sin.dims), heads, R));
  const int64_t table_rows = cos.numel() / width;
  RefTensor y = ref_make(x.dtype, x.dims);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t row = rows[b * S + s];
      if (row < 0 || row >= table_rows)
        return invalid_argument(fmt::format(
            "rotary: position {} (batch {}, step {}) is outside the cos/sin cache's {} rows", row,
            b, s, table_rows));
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t off =
            heads_first ? ((b * heads + h) * S + s) * D : ((b * S + s) * heads + h) * D;
        rotate_row(&x.data[off], &y.data[off], D, &cos.data[row * width], &sin.data[row * width], R,
                   interleaved, false);
      }
    }
  return y;
}

// --- ONNX RotaryEmbedding: X, cos_cache, sin_cache, position_ids (optional) ---------------------

// Heads and head size of X: 4-D [B, H, S, D], or 3-D [B, S, hidden] with num_heads.
Result<std::pair<int64_t, ir::DimExpr>> x_heads(const InferContext& c, bool ms) {
  const ir::Shape& x = c.input(0).shape;
  if (x.size() == 4) {
    if (!x[1].is_constant()) return c.error("the head count X[1] must be constant");
    return std::make_pair(x[1].offset, x[3]);
  }
  if (x.size() != 3)
    return c.error(fmt::format("X '{}' is {}, expected 4-D [B, H, S, D] or 3-D [B, S, hidden]",
                               c.input(0).name, ir::shape_to_string(x)));
  int64_t heads = c.node().attr_int("num_heads", 0);
  if (ms && heads == 0 && c.node().attr_int("rotary_embedding_dim", 0) == 0) {
    // onnxruntime: the head size is then twice the cache width.
    const ir::Shape& cs = c.input(2).shape;
    if (cs.size() == 2 && cs[1].is_constant() && cs[1].offset > 0 && x[2].is_constant() &&
        x[2].offset % (2 * cs[1].offset) == 0)
      heads = x[2].offset / (2 * cs[1].offset);
  }
  if (heads <= 0) return c.error("a 3-D X needs a positive 'num_heads'");
  KILN_ASSIGN_OR_RETURN(ir::DimExpr d, infer_head_size(c, x[2], heads, "X"));
  return std::make_pair(heads, d);
}

Status check_cache(const InferContext& c, size_t i, const ir::Shape& want, std::string_view what) {
  if (c.input(i).shape == want) return Status::ok_status();
  return c.error(fmt::format("{} '{}' is {}, expected {}", what, c.input(i).name,
                             ir::shape_to_string(c.input(i).shape), ir::shape_to_string(want)));
}

Status infer_onnx_rotary(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 4, 1, 1));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "X"));
  KILN_RETURN_IF_ERROR(check_same_dtype(c, 1));
  KILN_RETURN_IF_ERROR(check_same_dtype(c, 2));
  KILN_RETURN_IF_ERROR(check_interleaved(c));
  KILN_ASSIGN_OR_RETURN(auto hd, x_heads(c, false));
  KILN_ASSIGN_OR_RETURN(int64_t R, rotary_dim(c, "rotary_embedding_dim", hd.second));
  const ir::Shape& x = c.input(0).shape;
  const ir::DimExpr B = x[0], S = x.size() == 4 ? x[2] : x[1];
  const ir::DimExpr half = ir::DimExpr::constant(R / 2);
  if (c.has_input(3)) {
    const ir::Value& pos = c.input(3);
    if (pos.dtype != DType::kI64 && pos.dtype != DType::kI32)
      return c.error(
          fmt::format("position_ids '{}' is {}, expected int64", pos.name, dtype_name(pos.dtype)));
    if (pos.shape != ir::Shape{B, S})
      return c.error(fmt::format("position_ids '{}' is {}, expected [{}, {}]", pos.name,
                                 ir::shape_to_string(pos.shape), B.to_string(), S.to_string()));
    const ir::Shape& cs = c.input(1).shape;
    if (cs.size() != 2)
      return c.error(fmt::format("cos_cache is {}, expected [max_position, {}]",
                                 ir::shape_to_string(cs), R / 2));
    KILN_RETURN_IF_ERROR(check_cache(c, 1, {cs[0], half}, "cos_cache"));
    KILN_RETURN_IF_ERROR(check_cache(c, 2, {cs[0], half}, "sin_cache"));
  } else {
    // Tables per token, [B, S, R/2] or broadcasting to it (exporters write [1, S, R/2]).
    const ir::Shape& cs = c.input(1).shape;
    if (cs.empty() || cs.back() != half)
      return c.error(fmt::format("cos_cache (no position_ids) '{}' is {}, expected [{}, {}, {}]",
                                 c.input(1).name, ir::shape_to_string(cs), B.to_string(),
                                 S.to_string(), R / 2));
    KILN_RETURN_IF_ERROR(infer_check_broadcast(c, cs, {B, S, half}, "cos_cache (no position_ids)"));
    KILN_RETURN_IF_ERROR(check_cache(c, 2, cs, "sin_cache"));
  }
  c.set_output(0, c.input(0).dtype, x);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_onnx_rotary(const ir::Node& n,
                                               const std::vector<const RefTensor*>& in) {
  if (in.size() < 3 || !in[0] || !in[1] || !in[2])
    return invalid_argument("RotaryEmbedding needs X, cos_cache and sin_cache");
  const RefTensor& x = *in[0];
  const bool heads_first = x.dims.size() == 4;
  if (!heads_first && x.dims.size() != 3)
    return invalid_argument(
        fmt::format("RotaryEmbedding: X {} must be 3-D or 4-D", dims_to_string(x.dims)));
  const int64_t heads = heads_first ? x.dims[1] : n.attr_int("num_heads", 0);
  if (heads <= 0) return invalid_argument("RotaryEmbedding: a 3-D X needs num_heads");
  const int64_t B = x.dims[0], S = x.dims[heads_first ? 2 : 1];
  const int64_t D = heads_first ? x.dims[3] : x.dims[2] / heads;
  const int64_t R =
      n.attr_int("rotary_embedding_dim", 0) == 0 ? D : n.attr_int("rotary_embedding_dim", 0);
  std::vector<int64_t> rows(static_cast<size_t>(B * S));
  const RefTensor* pos = in.size() > 3 ? in[3] : nullptr;
  if (pos && pos->dims != std::vector<int64_t>{B, S})
    return invalid_argument(fmt::format("RotaryEmbedding: position_ids {} must be [{}, {}]",
                                        dims_to_string(pos->dims), B, S));
  if (pos) {
    for (int64_t i = 0; i < B * S; ++i) rows[i] = ref_to_int(pos->data[i]);
  } else {
    // Per-token tables broadcasting to [B, S, R/2]: the row of (b, s) in the table.
    const std::vector<int64_t>& cd = in[1]->dims;
    bool ok = !cd.empty() && cd.size() <= 3 && cd.back() == R / 2;
    const std::vector<int64_t> want = {B, S};
    const std::vector<int64_t> lead(cd.begin(), cd.end() - (cd.empty() ? 0 : 1));
    for (size_t i = 0; ok && i < lead.size(); ++i)
      ok = lead[i] == 1 || lead[i] == want[want.size() - lead.size() + i];
    if (!ok)
      return invalid_argument(
          fmt::format("RotaryEmbedding: cos_cache {} does not broadcast to [{}, {}, {}]",
                      dims_to_string(cd), B, S, R / 2));
    rows = ref_broadcast_index(want, lead);
  }
  KILN_ASSIGN_OR_RETURN(
      RefTensor y, rotary_heads(x, heads_first, heads, R, n.attr_int("interleaved", 0) != 0, *in[1],
                                *in[2], rows));
  return std::vector<RefTensor>{std::move(y)};
}

// --- com.microsoft RotaryEmbedding: input, position_ids, cos_cache, sin_cache -------------------
// position_ids is [B, S], or one element p (position p + s for step s). The `scale` attribute is
// accepted and, as in onnxruntime's kernels, not applied.

Status infer_ms_rotary(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(4, 4, 1, 1));
  KILN_RETURN_IF_ERROR(infer_float(c, 0, "input"));
  KILN_RETURN_IF_ERROR(check_same_dtype(c, 2));
  KILN_RETURN_IF_ERROR(check_same_dtype(c, 3));
  KILN_RETURN_IF_ERROR(check_interleaved(c));
  if (c.node().attr_int("is_packed_batching", 0) != 0)
    return c.unsupported("is_packed_batching = 1 (ragged batches) is not supported");
  if (c.node().attr_int("rotary_embedding_dim", 0) > 0 && c.node().attr_int("num_heads", 0) <= 0)
    return c.error("rotary_embedding_dim needs num_heads");
  KILN_ASSIGN_OR_RETURN(auto hd, x_heads(c, true));
  KILN_ASSIGN_OR_RETURN(int64_t R, rotary_dim(c, "rotary_embedding_dim", hd.second));
  const ir::Shape& x = c.input(0).shape;
  const ir::DimExpr B = x[0], S = x.size() == 4 ? x[2] : x[1];
  const ir::Value& pos = c.input(1);
  if (pos.dtype != DType::kI64 && pos.dtype != DType::kI32)
    return c.error(
        fmt::format("position_ids '{}' is {}, expected int64", pos.name, dtype_name(pos.dtype)));
  const bool one = pos.shape.empty() || pos.shape == ir::Shape{ir::DimExpr::constant(1)};
  if (!one && pos.shape != ir::Shape{B, S})
    return c.error(fmt::format("position_ids '{}' is {}, expected [1] or [{}, {}]", pos.name,
                               ir::shape_to_string(pos.shape), B.to_string(), S.to_string()));
  const ir::Shape& cs = c.input(2).shape;
  if (cs.size() != 2)
    return c.error(fmt::format("cos_cache is {}, expected [max_position, {}]",
                               ir::shape_to_string(cs), R / 2));
  KILN_RETURN_IF_ERROR(check_cache(c, 2, {cs[0], ir::DimExpr::constant(R / 2)}, "cos_cache"));
  KILN_RETURN_IF_ERROR(check_cache(c, 3, cs, "sin_cache"));
  c.set_output(0, c.input(0).dtype, x);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> ref_ms_rotary(const ir::Node& n,
                                             const std::vector<const RefTensor*>& in) {
  if (in.size() < 4 || !in[0] || !in[1] || !in[2] || !in[3])
    return invalid_argument("RotaryEmbedding needs input, position_ids, cos_cache, sin_cache");
  const RefTensor& x = *in[0];
  const RefTensor& cos = *in[2];
  const bool heads_first = x.dims.size() == 4;
  if ((!heads_first && x.dims.size() != 3) || cos.dims.size() != 2 || cos.dims[1] <= 0)
    return invalid_argument(fmt::format("RotaryEmbedding: input {} / cos_cache {} do not fit",
                                        dims_to_string(x.dims), dims_to_string(cos.dims)));
  const int64_t rdim = n.attr_int("rotary_embedding_dim", 0);
  int64_t heads = heads_first ? x.dims[1] : n.attr_int("num_heads", 0);
  if (heads <= 0) heads = x.dims[2] / (2 * cos.dims[1]);
  if (heads <= 0) return invalid_argument("RotaryEmbedding: cannot tell the head count");
  const int64_t B = x.dims[0], S = x.dims[heads_first ? 2 : 1];
  const int64_t D = heads_first ? x.dims[3] : x.dims[2] / heads;
  const RefTensor& pos = *in[1];
  std::vector<int64_t> rows(static_cast<size_t>(B * S));
  if (pos.numel() == 1) {
    for (int64_t i = 0; i < B * S; ++i) rows[i] = ref_to_int(pos.data[0]) + i % S;
  } else if (pos.dims == std::vector<int64_t>{B, S}) {
    for (int64_t i = 0; i < B * S; ++i) rows[i] = ref_to_int(pos.data[i]);
  } else {
    return invalid_argument(fmt::format("RotaryEmbedding: position_ids {} must be [1] or [{}, {}]",
                                        dims_to_string(pos.dims), B, S));
  }
  KILN_ASSIGN_OR_RETURN(RefTensor y,
                        rotary_heads(x, heads_first, heads, rdim == 0 ? D : rdim,
                                     n.attr_int("interleaved", 0) != 0, cos, *in[3], rows));
  return std::vector<RefTensor>{std::move(y)};
}

}  // namespace

void ops_register_rotary(std::vector<OpDef>& defs) {
  defs.push_back({kDomainKiln, "Rotary", infer_kiln_rotary, ref_kiln_rotary});
  defs.push_back({kDomainOnnx, "RotaryEmbedding", infer_onnx_rotary, ref_onnx_rotary});
  defs.push_back({kDomainMs, "RotaryEmbedding", infer_ms_rotary, ref_ms_rotary});
}

}  // namespace kiln::compiler
