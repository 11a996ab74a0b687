// Op family: layout, second half — ops that read their input with strides or repeats:
// Transpose, Slice, Split, Expand, Tile, Trilu (the rest is in layout.cc).
//
// Slice follows ONNX's clamping rules symbolically: bounds may be functions of S (e.g. an end
// taken from Shape(x)), and each comparison the rules need must come out the same for every S in
// [1, max_size]; otherwise the output length is not a linear expression and the node is refused.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

using ir::DimExpr;

// Slice bounds beyond this act like infinity (no dim gets near it); clamping them first keeps
// the symbolic arithmetic away from int64 overflow.
constexpr int64_t kHugeBound = int64_t{1} << 62;

bool all_constant(const std::vector<DimExpr>& v) {
  return std::all_of(v.begin(), v.end(), [](const DimExpr& d) { return d.is_constant(); });
}

ir::Shape to_shape(const std::vector<int64_t>& dims) {
  ir::Shape s;
  for (int64_t d : dims) s.push_back(DimExpr::constant(d));
  return s;
}

std::vector<DimExpr> to_exprs(const RefTensor& t) {
  std::vector<DimExpr> v;
  for (double x : t.data) v.push_back(DimExpr::constant(ref_to_int(x)));
  return v;
}

// Known contents of integer input i. Constant data is decoded here with saturation, so an end
// of INT64_MAX stays the largest int64 instead of wrapping.
std::optional<std::vector<DimExpr>> known_ints(const InferContext& c, size_t i) {
  if (!c.has_input(i) || !dtype_is_int_like(c.input(i).dtype)) return std::nullopt;
  if (auto t = c.input_constant(i); t && t->dims.size() <= 1) return to_exprs(*t);
  return c.input_ints(i);
}

// Known constant contents of integer input i (axes, steps, repeats).
std::optional<std::vector<int64_t>> known_consts(const InferContext& c, size_t i) {
  auto v = known_ints(c, i);
  if (!v || !all_constant(*v)) return std::nullopt;
  std::vector<int64_t> out;
  for (const DimExpr& d : *v) out.push_back(d.offset);
  return out;
}

Status node_error(const InferContext& c, const Status& s) { return c.error(s.message()); }

int64_t floor_div(int64_t a, int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }  // b > 0

// x gathered with `strides` (in elements of x) per output axis, starting at element `base`.
RefTensor ref_strided(const RefTensor& x, const std::vector<int64_t>& out_dims, int64_t base,
                      const std::vector<int64_t>& strides) {
  RefTensor out = ref_make(x.dtype, out_dims);
  const size_t r = out_dims.size();
  std::vector<int64_t> pos(r, 0);
  int64_t off = base;
  for (double& v : out.data) {
    v = x.data[static_cast<size_t>(off)];
    for (size_t a = r; a-- > 0;) {  // odometer increment
      if (++pos[a] < out_dims[a]) {
        off += strides[a];
        break;
      }
      off -= strides[a] * (out_dims[a] - 1);
      pos[a] = 0;
    }
  }
  return out;
}

// --- Transpose --------------------------------------------------------------------------------

Result<std::vector<int64_t>> transpose_perm(const ir::Node& n, size_t rank) {
  std::vector<int64_t> perm = transpose_perm_attr(n, rank);
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (size_t i = 0; ok && i < perm.size(); ++i) {
    ok = perm[i] >= 0 && perm[i] < static_cast<int64_t>(rank) && !seen[perm[i]];
    if (ok) seen[perm[i]] = true;
  }
  if (!ok)
    return invalid_argument(
        fmt::format("perm [{}] is not a permutation of the {} axes", fmt::join(perm, ", "), rank));
  return perm;
}

Status transpose_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 1, 1, 1));
  const ir::Value& x = c.input(0);
  Result<std::vector<int64_t>> perm = transpose_perm(c.node(), x.shape.size());
  if (!perm.ok()) return node_error(c, perm.status());
  ir::Shape out;
  for (int64_t p : *perm) out.push_back(x.shape[static_cast<size_t>(p)]);
  std::optional<std::vector<DimExpr>> ints;
  if (out.size() <= 1 && dtype_is_int_like(x.dtype)) ints = c.input_ints(0);
  c.set_output(0, x.dtype, out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> transpose_ref(const ir::Node& n,
                                             const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  const RefTensor& x = *in[0];
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> perm, transpose_perm(n, x.dims.size()));
  const std::vector<int64_t> st = ref_strides(x.dims);
  std::vector<int64_t> dims, strides;
  for (int64_t p : perm) {
    dims.push_back(x.dims[static_cast<size_t>(p)]);
    strides.push_back(st[static_cast<size_t>(p)]);
  }
  return std::vector<RefTensor>{ref_strided(x, dims, 0, strides)};
}

// --- Slice ------------------------------------------------------------------------------------

struct SliceAxis {
  DimExpr start;  // first element read
  DimExpr len;    // elements read
};

// One axis of Slice (dim d) by ONNX's rules; comparisons must hold for every S in [1, max_size].
Result<SliceAxis> slice_axis(const DimExpr& d, DimExpr st, DimExpr en, int64_t step,
                             int64_t max_size) {
  if (step == 0 || step == std::numeric_limits<int64_t>::min())
    return invalid_argument(fmt::format("step {} is invalid", step));
  for (DimExpr* v : {&st, &en})
    if (v->is_constant()) v->offset = std::clamp(v->offset, -kHugeBound, kHugeBound);
  auto lt = [&](const DimExpr& a, const DimExpr& b) -> Result<bool> {
    auto r = dim_less_always(a, b, max_size);
    if (!r)
      return invalid_argument(
          fmt::format("on a dim of {}, whether {} < {} depends on S; the slice length would not "
                      "be linear in S",
                      d.to_string(), a.to_string(), b.to_string()));
    return *r;
  };
  // A negative bound counts from the end; then clamp to [lo, hi].
  auto bound = [&](DimExpr v, const DimExpr& lo, const DimExpr& hi) -> Result<DimExpr> {
    KILN_ASSIGN_OR_RETURN(bool neg, lt(v, DimExpr::constant(0)));
    if (neg) {
      auto w = dim_add(v, d);
      if (!w) return invalid_argument("a slice bound overflows");
      v = *w;
    }
    KILN_ASSIGN_OR_RETURN(bool below, lt(v, lo));
    if (below) return lo;
    KILN_ASSIGN_OR_RETURN(bool above, lt(hi, v));
    return above ? hi : v;
  };
  const DimExpr zero = DimExpr::constant(0);
  if (d == zero) return SliceAxis{zero, zero};  // the clamping ranges below would be empty
  const auto last_opt = dim_sub(d, DimExpr::constant(1));
  if (!last_opt) return invalid_argument("the dim overflows");
  const DimExpr last = *last_opt;
  SliceAxis out;
  DimExpr end;
  if (step > 0) {
    KILN_ASSIGN_OR_RETURN(out.start, bound(st, zero, d));
    KILN_ASSIGN_OR_RETURN(end, bound(en, zero, d));
  } else {
    KILN_ASSIGN_OR_RETURN(out.start, bound(st, zero, last));
    KILN_ASSIGN_OR_RETURN(end, bound(en, DimExpr::constant(-1), last));
  }
  auto diff = step > 0 ? dim_sub(end, out.start) : dim_sub(out.start, end);
  if (!diff) return invalid_argument("a slice bound overflows");
  const int64_t k = step > 0 ? step : -step;
  KILN_ASSIGN_OR_RETURN(bool empty, lt(*diff, zero));
  if (empty) {
    out.len = zero;
  } else if (diff->coef % k != 0) {
    return invalid_argument(
        fmt::format("the slice length ceil(({}) / {}) is not linear in S", diff->to_string(), k));
  } else {
    out.len = DimExpr{diff->coef / k, ceil_div(diff->offset, k)};
  }
  return out;
}

struct SliceArgs {
  std::vector<DimExpr> starts, ends;
  std::vector<int64_t> axes, steps;
};

// Checks lengths and fills default axes/steps; normalises axes for `rank`.
Status slice_check(SliceArgs& a, size_t rank) {
  const size_t n = a.starts.size();
  if (a.axes.empty())
    for (size_t i = 0; i < n; ++i) a.axes.push_back(static_cast<int64_t>(i));
  if (a.steps.empty()) a.steps.assign(n, 1);
  if (a.ends.size() != n || a.axes.size() != n || a.steps.size() != n)
    return invalid_argument(
        fmt::format("starts, ends, axes and steps have {}, {}, {} and {} elements; they must match",
                    n, a.ends.size(), a.axes.size(), a.steps.size()));
  std::vector<bool> seen(rank, false);
  for (int64_t& ax : a.axes) {
    auto na = axis_normalize(ax, static_cast<int64_t>(rank));
    if (!na) return invalid_argument(fmt::format("axis {} is out of range for rank {}", ax, rank));
    if (seen[*na]) return invalid_argument(fmt::format("axis {} is repeated", ax));
    seen[*na] = true;
    ax = *na;
  }
  return Status::ok_status();
}

// Per-axis start and length for the whole tensor (unsliced axes: start 0, full length).
Result<std::vector<SliceAxis>> slice_plan(const ir::Shape& in, SliceArgs a, int64_t max_size,
                                          std::vector<int64_t>* steps) {
  KILN_RETURN_IF_ERROR(slice_check(a, in.size()));
  std::vector<SliceAxis> plan;
  for (const DimExpr& d : in) plan.push_back({DimExpr::constant(0), d});
  steps->assign(in.size(), 1);
  for (size_t i = 0; i < a.axes.size(); ++i) {
    const auto ax = static_cast<size_t>(a.axes[i]);
    Result<SliceAxis> r = slice_axis(in[ax], a.starts[i], a.ends[i], a.steps[i], max_size);
    if (!r.ok()) return r.status().with_context(fmt::format("axis {}", ax));
    plan[ax] = *r;
    (*steps)[ax] = a.steps[i];
  }
  return plan;
}

Status slice_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 5, 1, 1));
  const ir::Value& x = c.input(0);
  SliceArgs a;
  for (size_t i : {1, 2}) {
    auto v = known_ints(c, i);
    if (!v)
      return c.error(
          fmt::format("{} '{}' are run-time data; kiln needs Slice bounds known at compile time "
                      "(constants or functions of the size S)",
                      i == 1 ? "starts" : "ends", c.input(i).name));
    (i == 1 ? a.starts : a.ends) = *v;
  }
  for (size_t i : {3, 4}) {
    if (!c.has_input(i)) continue;
    auto v = known_consts(c, i);
    if (!v)
      return c.error(
          fmt::format("{} '{}' must be constant", i == 3 ? "axes" : "steps", c.input(i).name));
    (i == 3 ? a.axes : a.steps) = *v;
  }
  std::vector<int64_t> steps;
  Result<std::vector<SliceAxis>> plan = slice_plan(x.shape, a, c.max_size(), &steps);
  if (!plan.ok()) return node_error(c, plan.status());
  ir::Shape out;
  for (const SliceAxis& p : *plan) out.push_back(p.len);
  std::optional<std::vector<DimExpr>> ints;
  auto data = x.shape.size() == 1 && dtype_is_int_like(x.dtype) ? c.input_ints(0) : std::nullopt;
  const SliceAxis& p0 = plan->empty() ? SliceAxis{} : plan->front();
  if (data && p0.start.is_constant() && p0.len.is_constant()) {
    ints.emplace();
    for (int64_t i = 0; i < p0.len.offset; ++i)
      ints->push_back((*data)[static_cast<size_t>(p0.start.offset + i * steps[0])]);
  }
  c.set_output(0, x.dtype, out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> slice_ref(const ir::Node&, const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 3));
  const RefTensor& x = *in[0];
  SliceArgs a;
  a.starts = to_exprs(*in[1]);
  a.ends = to_exprs(*in[2]);
  if (const RefTensor* t = ref_opt(in, 3)) a.axes = ref_to_ints(*t);
  if (const RefTensor* t = ref_opt(in, 4)) a.steps = ref_to_ints(*t);
  std::vector<int64_t> steps;
  KILN_ASSIGN_OR_RETURN(std::vector<SliceAxis> plan, slice_plan(to_shape(x.dims), a, 1, &steps));
  const std::vector<int64_t> st = ref_strides(x.dims);
  std::vector<int64_t> dims, strides;
  int64_t base = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    dims.push_back(plan[i].len.offset);
    strides.push_back(st[i] * steps[i]);
    base += plan[i].start.offset * st[i];
  }
  return std::vector<RefTensor>{ref_strided(x, dims, base, strides)};
}

// --- Split ------------------------------------------------------------------------------------

// The sizes of `parts` chunks of dim d: given explicitly, or equal (the last one smaller when
// `uneven`, as opset 18's num_outputs allows).
Result<std::vector<DimExpr>> split_sizes(const DimExpr& d,
                                         const std::optional<std::vector<DimExpr>>& given,
                                         size_t parts, bool uneven) {
  if (given) {
    if (given->size() != parts)
      return invalid_argument(
          fmt::format("split has {} sizes for {} outputs", given->size(), parts));
    DimExpr sum = DimExpr::constant(0);
    for (const DimExpr& s : *given) {
      if (s.is_constant() && s.offset < 0)
        return invalid_argument(fmt::format("split size {} is negative", s.offset));
      auto t = dim_add(sum, s);
      if (!t) return invalid_argument("split sizes overflow");
      sum = *t;
    }
    if (sum != d)
      return invalid_argument(
          fmt::format("split sizes add up to {}, the dim is {}", sum.to_string(), d.to_string()));
    return *given;
  }
  const auto n = static_cast<int64_t>(parts);
  if (auto q = dim_div_exact(d, DimExpr::constant(n))) return std::vector<DimExpr>(parts, *q);
  if (!uneven || d.coef % n != 0)
    return invalid_argument(
        fmt::format("dim {} does not split into {} equal parts", d.to_string(), n));
  const DimExpr chunk{d.coef / n, ceil_div(d.offset, n)};
  const DimExpr last{d.coef - chunk.coef * (n - 1), d.offset - chunk.offset * (n - 1)};
  if (last.coef < 0 || (last.is_constant() && last.offset < 0) || last.eval(1) < 0)
    return invalid_argument(fmt::format("dim {} cannot be split into {} chunks of {}",
                                        d.to_string(), n, chunk.to_string()));
  std::vector<DimExpr> out(parts, chunk);
  out.back() = last;
  return out;
}

Status split_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(1, 2, 1, SIZE_MAX));
  const ir::Node& n = c.node();
  const ir::Value& x = c.input(0);
  const int64_t axis = n.attr_int("axis", 0);
  auto ax = axis_normalize(axis, static_cast<int64_t>(x.shape.size()));
  if (!ax) return c.error(fmt::format("axis {} is out of range for rank {}", axis, x.shape.size()));
  std::optional<std::vector<DimExpr>> given;
  if (c.has_input(1)) {
    given = known_ints(c, 1);
    if (!given)
      return c.error(
          fmt::format("the split sizes '{}' must be known at compile time", c.input(1).name));
  } else if (n.has_attr("split")) {
    given.emplace();
    for (int64_t v : n.attr_ints("split")) given->push_back(DimExpr::constant(v));
  }
  if (n.has_attr("num_outputs") &&
      n.attr_int("num_outputs", 0) != static_cast<int64_t>(c.num_outputs()))
    return c.error(fmt::format("num_outputs is {} but the node has {} outputs",
                               n.attr_int("num_outputs", 0), c.num_outputs()));
  const auto a = static_cast<size_t>(*ax);
  Result<std::vector<DimExpr>> sizes =
      split_sizes(x.shape[a], given, c.num_outputs(), n.has_attr("num_outputs"));
  if (!sizes.ok()) return node_error(c, sizes.status());
  auto data = x.shape.size() == 1 && dtype_is_int_like(x.dtype) ? c.input_ints(0) : std::nullopt;
  int64_t pos = 0;  // running start, while every size so far is constant
  for (size_t k = 0; k < sizes->size(); ++k) {
    ir::Shape out = x.shape;
    out[a] = (*sizes)[k];
    std::optional<std::vector<DimExpr>> ints;
    if (data && pos >= 0 && out[a].is_constant()) {
      ints.emplace(data->begin() + pos, data->begin() + pos + out[a].offset);
      pos += out[a].offset;
    } else {
      pos = -1;
    }
    c.set_output(k, x.dtype, out, std::move(ints));
  }
  return Status::ok_status();
}

Result<std::vector<RefTensor>> split_ref(const ir::Node& n,
                                         const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 1));
  const RefTensor& x = *in[0];
  const int64_t axis = n.attr_int("axis", 0);
  auto ax = axis_normalize(axis, static_cast<int64_t>(x.dims.size()));
  if (!ax) return invalid_argument(fmt::format("axis {} is out of range", axis));
  std::optional<std::vector<DimExpr>> given;
  if (const RefTensor* t = ref_opt(in, 1)) {
    given = to_exprs(*t);
  } else if (n.has_attr("split")) {
    given.emplace();
    for (int64_t v : n.attr_ints("split")) given->push_back(DimExpr::constant(v));
  }
  const auto a = static_cast<size_t>(*ax);
  KILN_ASSIGN_OR_RETURN(std::vector<DimExpr> sizes,
                        split_sizes(DimExpr::constant(x.dims[a]), given, n.outputs.size(),
                                    n.has_attr("num_outputs")));
  const std::vector<int64_t> st = ref_strides(x.dims);
  std::vector<RefTensor> outs;
  int64_t start = 0;
  for (const DimExpr& s : sizes) {
    std::vector<int64_t> dims = x.dims;
    dims[a] = s.offset;
    outs.push_back(ref_strided(x, dims, start * st[a], st));
    start += s.offset;
  }
  return outs;
}

}  // namespace

void ops_register_layout_slice(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "Transpose", transpose_infer, transpose_ref});
  defs.push_back({kDomainOnnx, "Slice", slice_infer, slice_ref});
  defs.push_back({kDomainOnnx, "Split", split_infer, split_ref});
}

}  // namespace kiln::compiler
