// Op family: layout, third part — ops that repeat or mask elements: Expand, Tile, Trilu (see
// layout.cc for the rest). Expand and Tile accept targets/repeats that depend on S, as long as
// every output dim stays linear in S.
#include <fmt/format.h>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

using ir::DimExpr;

// A 1-D int64 shape-like input (Expand's shape, Tile's repeats) known at compile time.
Result<std::vector<DimExpr>> shape_input(const InferContext& c, size_t i, const char* what) {
  const ir::Value& s = c.input(i);
  if (s.dtype != DType::kI64 || s.shape.size() != 1)
    return c.error(fmt::format("{} '{}' must be a 1-D int64 tensor, got {} {}", what, s.name,
                               dtype_name(s.dtype), ir::shape_to_string(s.shape)));
  auto v = c.input_ints(i);
  if (!v)
    return c.error(fmt::format(
        "{} '{}' is computed from run-time data; kiln needs it known at compile time (constants "
        "or functions of the size S)",
        what, s.name));
  for (const DimExpr& d : *v)
    if (d.is_constant() && d.offset < 0)
      return c.error(fmt::format("{} '{}' has the negative element {}", what, s.name, d.offset));
  return *v;
}

// Refuses output dims whose element count overflows or is absurd (a corrupt shape input), before
// anything is allocated.
Status check_out_dims(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    if (d < 0 || __builtin_mul_overflow(n, d, &n) || n > kRefMaxElements)
      return invalid_argument(fmt::format("output dims {} are too large", dims_to_string(dims)));
  return Status::ok_status();
}

// --- Expand -----------------------------------------------------------------------------------

Status expand_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  const ir::Value& x = c.input(0);
  KILN_ASSIGN_OR_RETURN(std::vector<DimExpr> target, shape_input(c, 1, "the shape"));
  KILN_ASSIGN_OR_RETURN(ir::Shape out, shape_broadcast(c, x.shape, target));
  std::optional<std::vector<DimExpr>> ints;
  if (out.size() == 1 && out[0].is_constant() &&
      out[0].offset <= static_cast<int64_t>(kMaxSymbolicInts) && dtype_is_int_like(x.dtype)) {
    // A scalar (or one element) repeated, or a vector kept as is.
    if (auto xi = c.input_ints(0); xi && !xi->empty()) {
      const auto len = static_cast<size_t>(out[0].offset);
      if (xi->size() == 1) ints.emplace(len, xi->front());
      if (xi->size() == len) ints = xi;
    }
  }
  c.set_output(0, x.dtype, out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> expand_ref(const ir::Node&,
                                          const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 2));
  const RefTensor& x = *in[0];
  const std::vector<int64_t> target = ref_to_ints(*in[1]);
  for (int64_t d : target)
    if (d < 0) return invalid_argument(fmt::format("the shape has the negative element {}", d));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> dims, ref_broadcast_dims(x.dims, target));
  KILN_RETURN_IF_ERROR(check_out_dims(dims));
  RefTensor out = ref_make(x.dtype, dims);
  const std::vector<int64_t> idx = ref_broadcast_index(dims, x.dims);
  for (size_t i = 0; i < idx.size(); ++i) out.data[i] = x.data[static_cast<size_t>(idx[i])];
  return std::vector<RefTensor>{std::move(out)};
}

// --- Tile -------------------------------------------------------------------------------------

Status tile_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  const ir::Value& x = c.input(0);
  KILN_ASSIGN_OR_RETURN(std::vector<DimExpr> reps, shape_input(c, 1, "the repeats"));
  if (reps.size() != x.shape.size())
    return c.error(fmt::format("{} repeats for an input of rank {}", reps.size(), x.shape.size()));
  ir::Shape out;
  for (size_t i = 0; i < reps.size(); ++i) {
    auto d = ir::dim_mul(x.shape[i], reps[i]);
    if (!d)
      return c.error(fmt::format("axis {}: {} repeated {} times is not linear in S", i,
                                 x.shape[i].to_string(), reps[i].to_string()));
    out.push_back(*d);
  }
  std::optional<std::vector<DimExpr>> ints;
  auto xi = out.size() == 1 && dtype_is_int_like(x.dtype) ? c.input_ints(0) : std::nullopt;
  if (xi && reps[0].is_constant() && reps[0].offset <= static_cast<int64_t>(kMaxSymbolicInts) &&
      xi->size() * static_cast<size_t>(reps[0].offset) <= kMaxSymbolicInts) {
    ints.emplace();
    for (int64_t r = 0; r < reps[0].offset; ++r) ints->insert(ints->end(), xi->begin(), xi->end());
  }
  c.set_output(0, x.dtype, out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> tile_ref(const ir::Node&, const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 2));
  const RefTensor& x = *in[0];
  const std::vector<int64_t> reps = ref_to_ints(*in[1]);
  if (reps.size() != x.dims.size())
    return invalid_argument(
        fmt::format("{} repeats for an input of rank {}", reps.size(), x.dims.size()));
  std::vector<int64_t> dims;
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0) return invalid_argument(fmt::format("repeat {} is negative", reps[i]));
    int64_t d = 0;
    if (__builtin_mul_overflow(x.dims[i], reps[i], &d)) return invalid_argument("dims overflow");
    dims.push_back(d);
  }
  KILN_RETURN_IF_ERROR(check_out_dims(dims));
  RefTensor out = ref_make(x.dtype, dims);
  const std::vector<int64_t> st = ref_strides(x.dims);
  const size_t r = dims.size();
  std::vector<int64_t> pos(r, 0);
  for (double& v : out.data) {
    int64_t off = 0;
    for (size_t a = 0; a < r; ++a) off += (pos[a] % x.dims[a]) * st[a];
    v = x.data[static_cast<size_t>(off)];
    for (size_t a = r; a-- > 0;) {
      if (++pos[a] < dims[a]) break;
      pos[a] = 0;
    }
  }
  return std::vector<RefTensor>{std::move(out)};
}

// --- Trilu ------------------------------------------------------------------------------------

Status trilu_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 2, 1, 1));
  const ir::Value& x = c.input(0);
  if (x.shape.size() < 2)
    return c.error(
        fmt::format("the input has shape {}; Trilu needs rank >= 2", ir::shape_to_string(x.shape)));
  if (c.has_input(1)) {
    const ir::Value& k = c.input(1);
    if (k.dtype != DType::kI64 || !(k.shape.empty() || k.shape == ir::Shape{DimExpr::constant(1)}))
      return c.error(fmt::format("k '{}' must be an int64 scalar, got {} {}", k.name,
                                 dtype_name(k.dtype), ir::shape_to_string(k.shape)));
  }
  c.set_output(0, x.dtype, x.shape);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> trilu_ref(const ir::Node& n,
                                         const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  const RefTensor& x = *in[0];
  if (x.dims.size() < 2) return invalid_argument("Trilu needs rank >= 2");
  int64_t k = 0;
  if (in.size() > 1 && in[1]) {
    if (in[1]->data.size() != 1) return invalid_argument("k must hold one element");
    k = ref_to_int(in[1]->data[0]);
  }
  const bool upper = n.attr_int("upper", 1) != 0;
  const int64_t rows = x.dims[x.dims.size() - 2], cols = x.dims.back();
  RefTensor out = x;
  for (size_t e = 0; e < out.data.size(); ++e) {
    const auto j = static_cast<int64_t>(e) % cols, i = (static_cast<int64_t>(e) / cols) % rows;
    const bool keep = upper ? j - i >= k : j - i <= k;
    if (!keep) out.data[e] = 0.0;
  }
  return std::vector<RefTensor>{std::move(out)};
}

}  // namespace

void ops_register_layout_expand(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "Expand", expand_infer, expand_ref});
  defs.push_back({kDomainOnnx, "Tile", tile_infer, tile_ref});
  defs.push_back({kDomainOnnx, "Trilu", trilu_infer, trilu_ref});
}

}  // namespace kiln::compiler
