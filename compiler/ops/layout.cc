// Op family: layout — ops that move or repeat elements without computing on them: Reshape,
// Flatten, Unsqueeze, Squeeze, Concat here; Transpose, Slice and Split (strided copies) in
// layout_slice.cc; Expand, Tile and Trilu in layout_expand.cc.
//
// Exporters compute every Reshape/Expand target from Shape(x), so targets arrive as symbolic
// ints (e.g. [2, S, 4, 16]); these ops pass such ints through when their own output is a small
// integer tensor, which lets graph_infer fold whole shape subgraphs.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

// The other two parts of the family.
void ops_register_layout_slice(std::vector<OpDef>& defs);   // ops/layout_slice.cc
void ops_register_layout_expand(std::vector<OpDef>& defs);  // ops/layout_expand.cc

namespace {

using ir::DimExpr;

std::string ints_to_string(const std::vector<DimExpr>& v) {
  std::vector<std::string> s;
  for (const DimExpr& d : v) s.push_back(d.to_string());
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// Input i's known contents when the output (of rank <= 1) carries the same elements in order.
std::optional<std::vector<DimExpr>> pass_ints(const InferContext& c, size_t i,
                                              const ir::Shape& out) {
  if (out.size() > 1 || !dtype_is_int_like(c.input(i).dtype)) return std::nullopt;
  return c.input_ints(i);
}

// The element count as a polynomial in S, evaluated at s (a dim may be negative at a small s;
// the polynomial identities below hold regardless); nullopt on overflow.
std::optional<int64_t> numel_at(const ir::Shape& shape, int64_t s) {
  int64_t n = 1;
  for (const DimExpr& d : shape) {
    int64_t x = 0;
    if (__builtin_mul_overflow(d.coef, s, &x) || __builtin_add_overflow(x, d.offset, &x) ||
        __builtin_mul_overflow(n, x, &n))
      return std::nullopt;
  }
  return n;
}

int64_t degree(const ir::Shape& shape) {
  return std::count_if(shape.begin(), shape.end(),
                       [](const DimExpr& d) { return !d.is_constant(); });
}

ir::Shape to_shape(const std::vector<int64_t>& dims) {
  ir::Shape s;
  for (int64_t d : dims) s.push_back(DimExpr::constant(d));
  return s;
}

// Concrete dims of a shape whose dims are all constant (the reference's own results).
std::vector<int64_t> to_dims(const ir::Shape& s) {
  std::vector<int64_t> d;
  for (const DimExpr& x : s) d.push_back(x.offset);
  return d;
}

std::vector<DimExpr> to_exprs(const RefTensor& t) {
  std::vector<DimExpr> v;
  for (double x : t.data) v.push_back(DimExpr::constant(ref_to_int(x)));
  return v;
}

// Whether shapes a and b hold the same number of elements at every S. Both element counts are
// polynomials in S of degree <= their number of symbolic dims, so agreeing at deg+1 points
// proves them equal.
Result<bool> same_numel(const ir::Shape& a, const ir::Shape& b) {
  const int64_t pts = std::max(degree(a), degree(b)) + 1;
  for (int64_t s = 1; s <= pts; ++s) {
    auto na = numel_at(a, s), nb = numel_at(b, s);
    if (!na || !nb) return invalid_argument("element count overflows int64");
    if (*na != *nb) return false;
  }
  return true;
}

// The dim q that makes numel(out with q at `at`) == numel(in) for every S. It must be linear
// in S: q(S) = a·S + b is fitted at two sizes and checked at enough sizes that
// numel(in) - q·numel(others), a polynomial of known degree, is identically zero. Sizes where
// the other dims hold no elements (a target dim S-1 at S=1) say nothing about q and are skipped.
Result<DimExpr> solve_missing_dim(const ir::Shape& in, ir::Shape out, size_t at) {
  out[at] = DimExpr::constant(1);
  const auto pts = static_cast<size_t>(std::max(degree(in), degree(out) + 1) + 1);
  std::vector<std::pair<int64_t, int64_t>> fit;  // (S, q(S))
  for (int64_t s = 1; s <= static_cast<int64_t>(pts) + 8 && fit.size() < std::max<size_t>(pts, 2);
       ++s) {
    auto ni = numel_at(in, s), no = numel_at(out, s);
    if (!ni || !no) return invalid_argument("element count overflows int64");
    if (*no == 0 && *ni == 0) continue;
    if (*no == 0 || *ni % *no != 0)
      return invalid_argument(
          fmt::format("{} elements at S={} are not a multiple of {}", *ni, s, *no));
    fit.emplace_back(s, *ni / *no);
  }
  if (fit.size() < 2) return invalid_argument("-1 cannot be inferred when another dim is 0");
  const auto [s1, q1] = fit[0];
  const auto [s2, q2] = fit[1];
  if ((q2 - q1) % (s2 - s1) != 0)
    return invalid_argument("the inferred -1 dim is not a linear function of S");
  const DimExpr r{(q2 - q1) / (s2 - s1), q1 - (q2 - q1) / (s2 - s1) * s1};
  for (const auto& [s, q] : fit)
    if (r.eval(s) != q)
      return invalid_argument("the inferred -1 dim is not a linear function of S");
  return r;
}

// Reshape's target (0 copies the input dim unless allowzero, one -1 is inferred) against the
// input shape. Shared by inference (symbolic) and the reference (all constant).
Result<ir::Shape> reshape_resolve(const ir::Shape& in, const std::vector<DimExpr>& target,
                                  bool allowzero) {
  ir::Shape out;
  std::optional<size_t> infer_at;
  bool has_zero = false;
  for (size_t i = 0; i < target.size(); ++i) {
    const DimExpr& t = target[i];
    if (!t.is_constant()) {
      out.push_back(t);
    } else if (t.offset == -1) {
      if (infer_at)
        return invalid_argument(
            fmt::format("target {} has more than one -1", ints_to_string(target)));
      infer_at = i;
      out.push_back(t);
    } else if (t.offset == 0 && !allowzero) {
      if (i >= in.size())
        return invalid_argument(
            fmt::format("target {} has 0 at position {} but the input {} has only {} dims",
                        ints_to_string(target), i, ir::shape_to_string(in), in.size()));
      out.push_back(in[i]);
    } else if (t.offset < 0) {
      return invalid_argument(
          fmt::format("target {} has the invalid dim {}", ints_to_string(target), t.offset));
    } else {
      has_zero |= t.offset == 0;
      out.push_back(t);
    }
  }
  if (infer_at && has_zero)
    return invalid_argument(
        fmt::format("target {} has both -1 and 0 with allowzero=1", ints_to_string(target)));
  if (infer_at) {
    Result<DimExpr> q = solve_missing_dim(in, out, *infer_at);
    if (!q.ok())
      return invalid_argument(fmt::format("cannot reshape {} to {}: {}", ir::shape_to_string(in),
                                          ints_to_string(target), q.status().message()));
    out[*infer_at] = *q;
    return out;
  }
  KILN_ASSIGN_OR_RETURN(bool same, same_numel(in, out));
  if (!same)
    return invalid_argument(fmt::format("cannot reshape {} to {}: the element counts differ",
                                        ir::shape_to_string(in), ir::shape_to_string(out)));
  return out;
}

RefTensor ref_with_dims(const RefTensor& x, std::vector<int64_t> dims) {
  RefTensor out = x;
  out.dims = std::move(dims);
  return out;
}

// A Status from a shared helper, as this node's error.
Status node_error(const InferContext& c, const Status& s) { return c.error(s.message()); }

// --- Reshape ----------------------------------------------------------------------------------

Status reshape_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  const ir::Value& s = c.input(1);
  if (s.dtype != DType::kI64 || s.shape.size() != 1)
    return c.error(fmt::format("the shape input '{}' must be a 1-D int64 tensor, got {} {}", s.name,
                               dtype_name(s.dtype), ir::shape_to_string(s.shape)));
  auto target = c.input_ints(1);
  if (!target)
    return c.error(fmt::format(
        "the target shape '{}' is computed from run-time data; kiln needs Reshape targets known "
        "at compile time (constants or functions of the size S)",
        s.name));
  Result<ir::Shape> out =
      reshape_resolve(c.input(0).shape, *target, c.node().attr_int("allowzero", 0) != 0);
  if (!out.ok()) return node_error(c, out.status());
  auto ints = pass_ints(c, 0, *out);
  c.set_output(0, c.input(0).dtype, *out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> reshape_ref(const ir::Node& n,
                                           const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 2));
  KILN_ASSIGN_OR_RETURN(ir::Shape out, reshape_resolve(to_shape(in[0]->dims), to_exprs(*in[1]),
                                                       n.attr_int("allowzero", 0) != 0));
  return std::vector<RefTensor>{ref_with_dims(*in[0], to_dims(out))};
}

// --- Flatten ----------------------------------------------------------------------------------

Result<ir::Shape> flatten_shape(const ir::Shape& in, int64_t axis) {
  const auto r = static_cast<int64_t>(in.size());
  if (axis < -r || axis > r)
    return invalid_argument(
        fmt::format("axis {} is out of range for rank {} (expected [{}, {}])", axis, r, -r, r));
  if (axis < 0) axis += r;
  DimExpr outer = DimExpr::constant(1), inner = DimExpr::constant(1);
  for (int64_t i = 0; i < r; ++i) {
    DimExpr& acc = i < axis ? outer : inner;
    auto p = ir::dim_mul(acc, in[static_cast<size_t>(i)]);
    if (!p)
      return invalid_argument(
          fmt::format("flattening {} at axis {} gives a dim that is not linear in S",
                      ir::shape_to_string(in), axis));
    acc = *p;
  }
  return ir::Shape{outer, inner};
}

Status flatten_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  Result<ir::Shape> out = flatten_shape(c.input(0).shape, c.node().attr_int("axis", 1));
  if (!out.ok()) return node_error(c, out.status());
  c.set_output(0, c.input(0).dtype, *out);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> flatten_ref(const ir::Node& n,
                                           const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  KILN_ASSIGN_OR_RETURN(ir::Shape out, flatten_shape(to_shape(in[0]->dims), n.attr_int("axis", 1)));
  return std::vector<RefTensor>{ref_with_dims(*in[0], to_dims(out))};
}

// --- Unsqueeze / Squeeze ----------------------------------------------------------------------

// Axes from the attribute (opset < 13) or from input 1 (opset >= 13), as given.
Result<std::optional<std::vector<int64_t>>> infer_axes(const InferContext& c) {
  if (c.node().has_attr("axes")) return std::optional(c.node().attr_ints("axes"));
  if (!c.has_input(1)) return std::optional<std::vector<int64_t>>();
  auto ints = c.input_ints(1);
  if (!ints ||
      !std::all_of(ints->begin(), ints->end(), [](const DimExpr& d) { return d.is_constant(); }))
    return c.error(fmt::format("the axes input '{}' must be a constant", c.input(1).name));
  std::vector<int64_t> axes;
  for (const DimExpr& d : *ints) axes.push_back(d.offset);
  return std::optional(axes);
}

std::optional<std::vector<int64_t>> ref_axes(const ir::Node& n,
                                             const std::vector<const RefTensor*>& in) {
  if (n.has_attr("axes")) return n.attr_ints("axes");
  if (in.size() < 2 || !in[1]) return std::nullopt;
  std::vector<int64_t> axes;
  for (double x : in[1]->data) axes.push_back(ref_to_int(x));
  return axes;
}

// Normalised, duplicate-free axes for rank r.
Result<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t r) {
  std::vector<int64_t> out;
  for (int64_t a : axes) {
    auto na = axis_normalize(a, r);
    if (!na) return invalid_argument(fmt::format("axis {} is out of range for rank {}", a, r));
    if (std::find(out.begin(), out.end(), *na) != out.end())
      return invalid_argument(fmt::format("axis {} is repeated in [{}]", a, fmt::join(axes, ", ")));
    out.push_back(*na);
  }
  return out;
}

Result<ir::Shape> unsqueeze_shape(const ir::Shape& in, const std::vector<int64_t>& axes) {
  const auto r = static_cast<int64_t>(in.size() + axes.size());
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> na, normalize_axes(axes, r));
  ir::Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < r; ++i)
    out.push_back(std::find(na.begin(), na.end(), i) != na.end() ? DimExpr::constant(1)
                                                                 : in[next++]);
  return out;
}

Status unsqueeze_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 2, 1, 1));
  KILN_ASSIGN_OR_RETURN(auto axes, infer_axes(c));
  if (!axes) return c.error("no axes (input 1 or attribute 'axes')");
  Result<ir::Shape> out = unsqueeze_shape(c.input(0).shape, *axes);
  if (!out.ok()) return node_error(c, out.status());
  auto ints = pass_ints(c, 0, *out);
  c.set_output(0, c.input(0).dtype, *out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> unsqueeze_ref(const ir::Node& n,
                                             const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  auto axes = ref_axes(n, in);
  if (!axes) return invalid_argument("no axes");
  KILN_ASSIGN_OR_RETURN(ir::Shape out, unsqueeze_shape(to_shape(in[0]->dims), *axes));
  return std::vector<RefTensor>{ref_with_dims(*in[0], to_dims(out))};
}

// Whether c·S + o == 1 for some S >= 1.
bool may_be_one(const DimExpr& d) {
  if (d.is_constant()) return d.offset == 1;
  const int64_t t = 1 - d.offset;
  return t % d.coef == 0 && t / d.coef >= 1;
}

// Without axes every dim of 1 goes; a dim that depends on S might be 1 at some size, which
// would change the rank at run time, so that case needs explicit axes.
Result<ir::Shape> squeeze_shape(const ir::Shape& in,
                                const std::optional<std::vector<int64_t>>& axes) {
  const DimExpr one = DimExpr::constant(1);
  ir::Shape out;
  if (!axes) {
    for (const DimExpr& d : in) {
      if (!d.is_constant() && may_be_one(d))
        return invalid_argument(fmt::format(
            "Squeeze without axes on {}: dim {} may be 1 at run time; give the axes explicitly",
            ir::shape_to_string(in), d.to_string()));
      if (d != one) out.push_back(d);
    }
    return out;
  }
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> na,
                        normalize_axes(*axes, static_cast<int64_t>(in.size())));
  for (size_t i = 0; i < in.size(); ++i) {
    const bool drop = std::find(na.begin(), na.end(), static_cast<int64_t>(i)) != na.end();
    if (drop && in[i] != one)
      return invalid_argument(fmt::format("cannot squeeze axis {} of {}: its dim is {}, not 1", i,
                                          ir::shape_to_string(in), in[i].to_string()));
    if (!drop) out.push_back(in[i]);
  }
  return out;
}

Status squeeze_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 2, 1, 1));
  KILN_ASSIGN_OR_RETURN(auto axes, infer_axes(c));
  Result<ir::Shape> out = squeeze_shape(c.input(0).shape, axes);
  if (!out.ok()) return node_error(c, out.status());
  auto ints = pass_ints(c, 0, *out);
  c.set_output(0, c.input(0).dtype, *out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> squeeze_ref(const ir::Node& n,
                                           const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  KILN_ASSIGN_OR_RETURN(ir::Shape out, squeeze_shape(to_shape(in[0]->dims), ref_axes(n, in)));
  return std::vector<RefTensor>{ref_with_dims(*in[0], to_dims(out))};
}

// --- Concat -----------------------------------------------------------------------------------

Result<ir::Shape> concat_shape(const std::vector<ir::Shape>& ins, int64_t axis) {
  const ir::Shape& first = ins[0];
  const auto r = static_cast<int64_t>(first.size());
  auto na = axis_normalize(axis, r);
  if (!na) return invalid_argument(fmt::format("axis {} is out of range for rank {}", axis, r));
  ir::Shape out = first;
  for (size_t k = 1; k < ins.size(); ++k) {
    const ir::Shape& s = ins[k];
    if (s.size() != first.size())
      return invalid_argument(fmt::format("input {} has shape {}, input 0 has {}: ranks differ", k,
                                          ir::shape_to_string(s), ir::shape_to_string(first)));
    for (int64_t i = 0; i < r; ++i) {
      const auto u = static_cast<size_t>(i);
      if (i == *na) {
        auto sum = dim_add(out[u], s[u]);
        if (!sum) return invalid_argument("the concatenated dim overflows");
        out[u] = *sum;
      } else if (s[u] != first[u]) {
        return invalid_argument(
            fmt::format("input {} has shape {}, input 0 has {}: axis {} differs", k,
                        ir::shape_to_string(s), ir::shape_to_string(first), i));
      }
    }
  }
  return out;
}

Status concat_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, SIZE_MAX, 1, 1));
  if (!c.node().has_attr("axis")) return c.error("the attribute 'axis' is required");
  std::vector<ir::Shape> shapes;
  const DType dt = c.input(0).dtype;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) return c.error(fmt::format("input {} is missing", i));
    if (c.input(i).dtype != dt)
      return c.error(fmt::format("input {} is {}, input 0 is {}", i, dtype_name(c.input(i).dtype),
                                 dtype_name(dt)));
    shapes.push_back(c.input(i).shape);
  }
  Result<ir::Shape> out = concat_shape(shapes, c.node().attr_int("axis", 0));
  if (!out.ok()) return node_error(c, out.status());
  std::optional<std::vector<DimExpr>> ints;
  if (out->size() == 1 && dtype_is_int_like(dt)) {  // shape arithmetic: join the known pieces
    ints.emplace();
    for (size_t i = 0; i < c.num_inputs() && ints; ++i) {
      auto part = c.input_ints(i);
      if (!part || ints->size() + part->size() > kMaxSymbolicInts) {
        ints.reset();
      } else {
        ints->insert(ints->end(), part->begin(), part->end());
      }
    }
  }
  c.set_output(0, dt, *out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> concat_ref(const ir::Node& n,
                                          const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, in.size()));
  if (in.empty()) return invalid_argument("no inputs");
  std::vector<ir::Shape> shapes;
  for (const RefTensor* t : in) shapes.push_back(to_shape(t->dims));
  const int64_t axis = n.attr_int("axis", 0);
  KILN_ASSIGN_OR_RETURN(ir::Shape s, concat_shape(shapes, axis));
  RefTensor out = ref_make(in[0]->dtype, to_dims(s));
  const auto a = static_cast<size_t>(*axis_normalize(axis, static_cast<int64_t>(s.size())));
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i < a) outer *= s[i].offset;
    if (i > a) inner *= s[i].offset;
  }
  size_t pos = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (const RefTensor* t : in) {
      const int64_t block = t->dims[a] * inner;
      const auto* src = t->data.data() + o * block;
      std::copy(src, src + block, out.data.begin() + static_cast<std::ptrdiff_t>(pos));
      pos += static_cast<size_t>(block);
    }
  }
  return std::vector<RefTensor>{std::move(out)};
}

}  // namespace

void ops_register_layout(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "Reshape", reshape_infer, reshape_ref});
  defs.push_back({kDomainOnnx, "Flatten", flatten_infer, flatten_ref});
  defs.push_back({kDomainOnnx, "Unsqueeze", unsqueeze_infer, unsqueeze_ref});
  defs.push_back({kDomainOnnx, "Squeeze", squeeze_infer, squeeze_ref});
  defs.push_back({kDomainOnnx, "Concat", concat_infer, concat_ref});
  ops_register_layout_slice(defs);
  ops_register_layout_expand(defs);
}

}  // namespace kiln::compiler
