// Op family: gather — indexed reads and writes: Gather, GatherElements, GatherND, ScatterND.
//
// Gather of a 1-D integer tensor with constant indices is shape arithmetic (Shape(x)[1]); its
// symbolic contents are recorded so graph_infer can fold it. Every reference kernel checks each
// index against its axis and reports the first one out of range.
#include <fmt/format.h>

#include <algorithm>

#include "compiler/ops/op_util.h"

namespace kiln::compiler {

namespace {

using ir::DimExpr;

bool is_index_dtype(DType d) { return d == DType::kI64 || d == DType::kI32; }

Status check_indices(const InferContext& c, size_t i) {
  const ir::Value& v = c.input(i);
  if (!is_index_dtype(v.dtype))
    return c.error(
        fmt::format("indices '{}' are {}; expected int32 or int64", v.name, dtype_name(v.dtype)));
  return Status::ok_status();
}

// Index v on an axis of length n, negative counting from the end.
Result<int64_t> ref_index(double v, int64_t n) {
  int64_t i = ref_to_int(v);
  if (i < -n || i >= n)
    return invalid_argument(fmt::format("index {} is out of range for an axis of {}", i, n));
  return i < 0 ? i + n : i;
}

int64_t product(const std::vector<int64_t>& d, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= d[i];
  return p;
}

// --- Gather -----------------------------------------------------------------------------------

Status gather_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_indices(c, 1));
  const ir::Value& x = c.input(0);
  const ir::Value& idx = c.input(1);
  const auto r = static_cast<int64_t>(x.shape.size());
  const int64_t axis = c.node().attr_int("axis", 0);
  auto ax = axis_normalize(axis, r);
  if (!ax) return c.error(fmt::format("axis {} is out of range for rank {}", axis, r));
  const auto a = static_cast<size_t>(*ax);
  ir::Shape out(x.shape.begin(), x.shape.begin() + *ax);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), x.shape.begin() + *ax + 1, x.shape.end());
  std::optional<std::vector<DimExpr>> ints;
  const bool int_data = dtype_is_integer(x.dtype) || x.dtype == DType::kBool;
  if (r == 1 && out.size() <= 1 && int_data) {  // picking elements of a shape: Shape(x)[i]
    auto data = c.input_ints(0);
    auto ids = c.input_ints(1);
    if (data && ids &&
        std::all_of(ids->begin(), ids->end(), [](const DimExpr& d) { return d.is_constant(); })) {
      ints.emplace();
      const auto n = static_cast<int64_t>(data->size());
      for (const DimExpr& i : *ids) {
        if (i.offset < -n || i.offset >= n)
          return c.error(
              fmt::format("index {} is out of range for axis {} of length {}", i.offset, a, n));
        ints->push_back((*data)[static_cast<size_t>(i.offset < 0 ? i.offset + n : i.offset)]);
      }
    }
  }
  c.set_output(0, x.dtype, out, std::move(ints));
  return Status::ok_status();
}

Result<std::vector<RefTensor>> gather_ref(const ir::Node& n,
                                          const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 2));
  const RefTensor &x = *in[0], &idx = *in[1];
  const int64_t axis = n.attr_int("axis", 0);
  auto ax = axis_normalize(axis, static_cast<int64_t>(x.dims.size()));
  if (!ax) return invalid_argument(fmt::format("axis {} is out of range", axis));
  const auto a = static_cast<size_t>(*ax);
  std::vector<int64_t> dims(x.dims.begin(), x.dims.begin() + *ax);
  dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
  dims.insert(dims.end(), x.dims.begin() + *ax + 1, x.dims.end());
  RefTensor out = ref_make(x.dtype, dims);
  const int64_t outer = product(x.dims, 0, a), len = x.dims[a];
  const int64_t inner = product(x.dims, a + 1, x.dims.size());
  auto dst = out.data.begin();
  for (int64_t o = 0; o < outer; ++o) {
    for (double v : idx.data) {
      KILN_ASSIGN_OR_RETURN(int64_t i, ref_index(v, len));
      const auto src = x.data.begin() + (o * len + i) * inner;
      dst = std::copy(src, src + inner, dst);
    }
  }
  return std::vector<RefTensor>{std::move(out)};
}

// --- GatherElements ---------------------------------------------------------------------------

Status gather_elements_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_indices(c, 1));
  const ir::Value& x = c.input(0);
  const ir::Value& idx = c.input(1);
  const auto r = static_cast<int64_t>(x.shape.size());
  if (idx.shape.size() != x.shape.size() || r == 0)
    return c.error(fmt::format("data {} and indices {} must have the same rank >= 1",
                               ir::shape_to_string(x.shape), ir::shape_to_string(idx.shape)));
  const int64_t axis = c.node().attr_int("axis", 0);
  if (!axis_normalize(axis, r))
    return c.error(fmt::format("axis {} is out of range for rank {}", axis, r));
  c.set_output(0, x.dtype, idx.shape);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> gather_elements_ref(const ir::Node& n,
                                                   const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 2));
  const RefTensor &x = *in[0], &idx = *in[1];
  const size_t r = x.dims.size();
  auto ax = axis_normalize(n.attr_int("axis", 0), static_cast<int64_t>(r));
  if (!ax || idx.dims.size() != r) return invalid_argument("ranks or axis do not match");
  for (size_t i = 0; i < r; ++i)
    if (static_cast<int64_t>(i) != *ax && idx.dims[i] > x.dims[i])
      return invalid_argument(fmt::format("indices dims {} exceed data dims {} on axis {}",
                                          dims_to_string(idx.dims), dims_to_string(x.dims), i));
  RefTensor out = ref_make(x.dtype, idx.dims);
  const std::vector<int64_t> st = ref_strides(x.dims);
  std::vector<int64_t> pos(r, 0);
  for (size_t e = 0; e < out.data.size(); ++e) {
    int64_t off = 0;
    for (size_t a = 0; a < r; ++a) {
      int64_t p = pos[a];
      if (static_cast<int64_t>(a) == *ax) {
        KILN_ASSIGN_OR_RETURN(p, ref_index(idx.data[e], x.dims[a]));
      }
      off += p * st[a];
    }
    out.data[e] = x.data[static_cast<size_t>(off)];
    for (size_t a = r; a-- > 0;) {
      if (++pos[a] < idx.dims[a]) break;
      pos[a] = 0;
    }
  }
  return std::vector<RefTensor>{std::move(out)};
}

// --- GatherND / ScatterND: index tuples of length m address data[b.., i0, .., i(m-1), ...] ----

// Checks that the last dim of indices is a constant m in [1, rank - batch_dims].
Result<int64_t> tuple_length(const InferContext& c, const ir::Shape& data, const ir::Shape& idx,
                             int64_t batch_dims) {
  if (idx.empty() || !idx.back().is_constant())
    return c.error(fmt::format("indices {} need a constant last dim", ir::shape_to_string(idx)));
  const int64_t m = idx.back().offset;
  if (m < 1 || m > static_cast<int64_t>(data.size()) - batch_dims)
    return c.error(fmt::format("indices {} address {} dims of data {} (batch_dims {})",
                               ir::shape_to_string(idx), m, ir::shape_to_string(data), batch_dims));
  return m;
}

Status gather_nd_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(2, 2, 1, 1));
  KILN_RETURN_IF_ERROR(check_indices(c, 1));
  const ir::Shape& x = c.input(0).shape;
  const ir::Shape& idx = c.input(1).shape;
  const int64_t b = c.node().attr_int("batch_dims", 0);
  if (b < 0 || b >= static_cast<int64_t>(std::min(x.size(), idx.size())))
    return c.error(
        fmt::format("batch_dims {} must be less than the ranks of data {} and "
                    "indices {}",
                    b, ir::shape_to_string(x), ir::shape_to_string(idx)));
  for (size_t i = 0; i < static_cast<size_t>(b); ++i)
    if (x[i] != idx[i])
      return c.error(fmt::format("batch dim {} differs: data {}, indices {}", i,
                                 ir::shape_to_string(x), ir::shape_to_string(idx)));
  KILN_ASSIGN_OR_RETURN(int64_t m, tuple_length(c, x, idx, b));
  ir::Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), x.begin() + b + m, x.end());
  c.set_output(0, c.input(0).dtype, out);
  return Status::ok_status();
}

// Offset (in elements, within one batch) of the slice that the tuple at `t` addresses.
Result<int64_t> tuple_offset(const RefTensor& idx, size_t t, int64_t m,
                             const std::vector<int64_t>& dims, size_t first) {
  const std::vector<int64_t> st = ref_strides(dims);
  int64_t off = 0;
  for (int64_t k = 0; k < m; ++k) {
    const size_t a = first + static_cast<size_t>(k);
    KILN_ASSIGN_OR_RETURN(int64_t i, ref_index(idx.data[t + static_cast<size_t>(k)], dims[a]));
    off += i * st[a];
  }
  return off;
}

Result<std::vector<RefTensor>> gather_nd_ref(const ir::Node& n,
                                             const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 2));
  const RefTensor &x = *in[0], &idx = *in[1];
  const auto b = static_cast<size_t>(std::max<int64_t>(n.attr_int("batch_dims", 0), 0));
  if (idx.dims.empty() || b >= std::min(x.dims.size(), idx.dims.size()))
    return invalid_argument("batch_dims or ranks do not fit");
  const int64_t m = idx.dims.back();
  if (m < 1 || static_cast<size_t>(m) > x.dims.size() - b)
    return invalid_argument(
        fmt::format("index tuples of {} for data of rank {}", m, x.dims.size()));
  for (size_t i = 0; i < b; ++i)
    if (x.dims[i] != idx.dims[i]) return invalid_argument("batch dims differ");
  std::vector<int64_t> dims(idx.dims.begin(), idx.dims.end() - 1);
  dims.insert(dims.end(), x.dims.begin() + static_cast<std::ptrdiff_t>(b) + m, x.dims.end());
  RefTensor out = ref_make(x.dtype, dims);
  const int64_t batches = product(x.dims, 0, b);
  const int64_t tuples = product(idx.dims, b, idx.dims.size() - 1);
  const int64_t batch_size = product(x.dims, b, x.dims.size());
  const int64_t slice = product(x.dims, b + static_cast<size_t>(m), x.dims.size());
  auto dst = out.data.begin();
  for (int64_t bi = 0; bi < batches; ++bi) {
    for (int64_t t = 0; t < tuples; ++t) {
      const auto at = static_cast<size_t>((bi * tuples + t) * m);
      KILN_ASSIGN_OR_RETURN(int64_t off, tuple_offset(idx, at, m, x.dims, b));
      const auto src = x.data.begin() + bi * batch_size + off;
      dst = std::copy(src, src + slice, dst);
    }
  }
  return std::vector<RefTensor>{std::move(out)};
}

bool valid_reduction(const std::string& r) {
  return r == "none" || r == "add" || r == "mul" || r == "max" || r == "min";
}

Status scatter_nd_infer(InferContext& c) {
  KILN_RETURN_IF_ERROR(c.require(3, 3, 1, 1));
  KILN_RETURN_IF_ERROR(check_indices(c, 1));
  const ir::Value& x = c.input(0);
  const ir::Value& u = c.input(2);
  const ir::Shape& idx = c.input(1).shape;
  const std::string red = c.node().attr_string("reduction", "none");
  if (!valid_reduction(red))
    return c.error(fmt::format("reduction '{}' is not one of none, add, mul, max, min", red));
  if (u.dtype != x.dtype)
    return c.error(
        fmt::format("updates are {}, data is {}", dtype_name(u.dtype), dtype_name(x.dtype)));
  KILN_ASSIGN_OR_RETURN(int64_t m, tuple_length(c, x.shape, idx, 0));
  ir::Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), x.shape.begin() + m, x.shape.end());
  if (u.shape != want)
    return c.error(fmt::format("updates have shape {}; data {} and indices {} need {}",
                               ir::shape_to_string(u.shape), ir::shape_to_string(x.shape),
                               ir::shape_to_string(idx), ir::shape_to_string(want)));
  c.set_output(0, x.dtype, x.shape);
  return Status::ok_status();
}

Result<std::vector<RefTensor>> scatter_nd_ref(const ir::Node& n,
                                              const std::vector<const RefTensor*>& in) {
  KILN_RETURN_IF_ERROR(ref_check_inputs(in, 3));
  const RefTensor &x = *in[0], &idx = *in[1], &u = *in[2];
  const std::string red = n.attr_string("reduction", "none");
  if (!valid_reduction(red)) return invalid_argument(fmt::format("reduction '{}'", red));
  if (idx.dims.empty()) return invalid_argument("indices must have rank >= 1");
  const int64_t m = idx.dims.back();
  if (m < 1 || static_cast<size_t>(m) > x.dims.size())
    return invalid_argument(
        fmt::format("index tuples of {} for data of rank {}", m, x.dims.size()));
  const int64_t tuples = product(idx.dims, 0, idx.dims.size() - 1);
  const int64_t slice = product(x.dims, static_cast<size_t>(m), x.dims.size());
  if (static_cast<int64_t>(u.data.size()) != tuples * slice)
    return invalid_argument(
        fmt::format("updates hold {} values, expected {}", u.data.size(), tuples * slice));
  RefTensor out = x;
  for (int64_t t = 0; t < tuples; ++t) {
    KILN_ASSIGN_OR_RETURN(int64_t off, tuple_offset(idx, static_cast<size_t>(t * m), m, x.dims, 0));
    for (int64_t k = 0; k < slice; ++k) {
      double& d = out.data[static_cast<size_t>(off + k)];
      const double v = u.data[static_cast<size_t>(t * slice + k)];
      if (red == "add") {
        d += v;
      } else if (red == "mul") {
        d *= v;
      } else if (red == "max") {
        d = std::max(d, v);
      } else if (red == "min") {
        d = std::min(d, v);
      } else {
        d = v;
      }
    }
  }
  return std::vector<RefTensor>{std::move(out)};
}

}  // namespace

void ops_register_gather(std::vector<OpDef>& defs) {
  defs.push_back({kDomainOnnx, "Gather", gather_infer, gather_ref});
  defs.push_back({kDomainOnnx, "GatherElements", gather_elements_infer, gather_elements_ref});
  defs.push_back({kDomainOnnx, "GatherND", gather_nd_infer, gather_nd_ref});
  defs.push_back({kDomainOnnx, "ScatterND", scatter_nd_infer, scatter_nd_ref});
}

}  // namespace kiln::compiler
