#include "compiler/reference_interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "compiler/reference_ops.h"

namespace kiln::compiler {

int64_t RefTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

namespace {

// The reference refuses tensors larger than this many elements (a size typo, not a model).
constexpr int64_t kMaxElements = int64_t{1} << 31;

std::string dims_str(const std::vector<int64_t>& d) {
  return fmt::format("[{}]", fmt::join(d, ", "));
}

// Dims of `v` at size `s`; errors for negative dims or too many elements.
Result<std::vector<int64_t>> eval_dims(const ir::Value& v, int64_t s) {
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (const ir::DimExpr& d : v.shape) {
    int64_t x = 0;
    if (__builtin_mul_overflow(d.coef, s, &x) || __builtin_add_overflow(x, d.offset, &x) || x < 0)
      return invalid_argument(fmt::format("value '{}' {}: a dim is negative or overflows at S={}",
                                          v.name, ir::shape_to_string(v.shape), s));
    if (__builtin_mul_overflow(n, x, &n) || n > kMaxElements)
      return resource_exhausted(fmt::format("value '{}' {} has more than {} elements at S={}",
                                            v.name, ir::shape_to_string(v.shape), kMaxElements, s));
    dims.push_back(x);
  }
  return dims;
}

double half_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

template <typename T>
T load(const uint8_t* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}

// Decodes constant bytes of `dtype` into doubles.
Result<RefTensor> decode_constant(const ir::Value& v) {
  RefTensor t;
  t.dtype = v.dtype;
  t.dims = v.constant->dims;
  const size_t es = dtype_size(v.dtype);
  const auto n = static_cast<size_t>(t.numel());
  if (es == 0 || v.constant->bytes.size() != n * es)
    return internal_error(fmt::format("constant '{}' holds {} bytes for dims {} of {}", v.name,
                                      v.constant->bytes.size(), dims_str(t.dims),
                                      dtype_name(v.dtype)));
  t.data.resize(n);
  const uint8_t* p = v.constant->bytes.data();
  for (size_t i = 0; i < n; ++i, p += es) {
    switch (v.dtype) {
      case DType::kF32:
        t.data[i] = load<float>(p);
        break;
      case DType::kF64:
        t.data[i] = load<double>(p);
        break;
      case DType::kF16:
        t.data[i] = half_to_double(load<uint16_t>(p));
        break;
      case DType::kBF16:
        t.data[i] = std::bit_cast<float>(static_cast<uint32_t>(load<uint16_t>(p)) << 16);
        break;
      case DType::kI64:
        t.data[i] = static_cast<double>(load<int64_t>(p));
        break;
      case DType::kI32:
        t.data[i] = load<int32_t>(p);
        break;
      case DType::kI8:
        t.data[i] = load<int8_t>(p);
        break;
      case DType::kU8:
        t.data[i] = load<uint8_t>(p);
        break;
      case DType::kBool:
        t.data[i] = *p != 0 ? 1.0 : 0.0;
        break;
      default:
        return internal_error(fmt::format("constant '{}' has no dtype", v.name));
    }
  }
  return t;
}

Result<std::vector<RefTensor>> eval_node(const ir::Node& n,
                                         const std::vector<const RefTensor*>& in) {
  auto arg = [&](size_t i) -> const RefTensor* { return i < in.size() ? in[i] : nullptr; };
  auto need = [&](size_t count) -> Status {
    for (size_t i = 0; i < count; ++i)
      if (!arg(i)) return invalid_argument(fmt::format("required input {} is missing", i));
    return Status::ok_status();
  };
  auto one = [](Result<RefTensor> r) -> Result<std::vector<RefTensor>> {
    if (!r.ok()) return r.status();
    return std::vector<RefTensor>{std::move(r).value()};
  };
  const std::string& op = n.op;
  if (op == "MatMul") {
    KILN_RETURN_IF_ERROR(need(2));
    return one(ref_matmul(*in[0], *in[1]));
  }
  if (op == "Gemm") {
    KILN_RETURN_IF_ERROR(need(2));
    return one(ref_gemm(*in[0], *in[1], arg(2), n.attr_int("transA", 0) != 0,
                        n.attr_int("transB", 0) != 0, n.attr_float("alpha", 1.0),
                        n.attr_float("beta", 1.0)));
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    KILN_RETURN_IF_ERROR(need(2));
    return one(ref_binary(op, *in[0], *in[1]));
  }
  if (op == "Relu" || op == "Sigmoid" || op == "Tanh") {
    KILN_RETURN_IF_ERROR(need(1));
    return one(ref_unary(op, *in[0]));
  }
  if (op == "Softmax") {
    KILN_RETURN_IF_ERROR(need(1));
    return one(ref_softmax(*in[0], n.attr_int("axis", -1)));
  }
  if (op == "Identity" || op == "Dropout") {  // inference: a copy
    KILN_RETURN_IF_ERROR(need(1));
    return std::vector<RefTensor>{*in[0]};
  }
  return unimplemented("the reference interpreter does not implement this op");
}

}  // namespace

Result<std::map<std::string, RefTensor>> reference_run(
    const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& inputs) {
  if (size < 1) return invalid_argument(fmt::format("size {} must be >= 1", size));
  KILN_RETURN_IF_ERROR(ir::graph_verify(g));
  std::vector<std::optional<RefTensor>> env(g.values.size());
  std::vector<std::string> names;
  for (int id : g.inputs) {
    const ir::Value& v = g.values[id];
    names.push_back(v.name);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) return invalid_argument(fmt::format("missing input '{}'", v.name));
    const RefTensor& t = it->second;
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> want, eval_dims(v, size));
    if (t.dims != want)
      return invalid_argument(
          fmt::format("input '{}' has dims {}, the graph expects {} = {} at S={}", v.name,
                      dims_str(t.dims), ir::shape_to_string(v.shape), dims_str(want), size));
    if (t.dtype != v.dtype)
      return invalid_argument(fmt::format("input '{}' is {}, the graph expects {}", v.name,
                                          dtype_name(t.dtype), dtype_name(v.dtype)));
    if (static_cast<int64_t>(t.data.size()) != t.numel())
      return invalid_argument(fmt::format("input '{}' holds {} values, its dims {} need {}", v.name,
                                          t.data.size(), dims_str(t.dims), t.numel()));
    env[id] = t;
  }
  for (const auto& [name, t] : inputs)
    if (std::find(names.begin(), names.end(), name) == names.end())
      return invalid_argument(
          fmt::format("unknown input '{}' (graph inputs: {})", name, fmt::join(names, ", ")));
  for (size_t i = 0; i < g.values.size(); ++i)
    if (g.values[i].constant) {
      KILN_ASSIGN_OR_RETURN(env[i], decode_constant(g.values[i]));
    }

  for (const ir::Node& n : g.nodes) {
    const std::string where = fmt::format("node '{}' ({})", n.name, n.op);
    if (n.op == "Constant") continue;  // its output already holds the data
    std::vector<const RefTensor*> in;
    for (int id : n.inputs) {
      if (id >= 0 && !env[id])
        return internal_error(
            fmt::format("{}: input '{}' has not been computed", where, g.values[id].name));
      in.push_back(id >= 0 ? &*env[id] : nullptr);
    }
    Result<std::vector<RefTensor>> r = eval_node(n, in);
    if (!r.ok()) return r.status().with_context(where);
    if (r->size() < n.outputs.size())
      return internal_error(fmt::format("{}: computed {} outputs, the node has {}", where,
                                        r->size(), n.outputs.size()));
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const ir::Value& v = g.values[n.outputs[k]];
      KILN_ASSIGN_OR_RETURN(std::vector<int64_t> want, eval_dims(v, size));
      RefTensor& t = (*r)[k];
      if (t.dims != want)
        return internal_error(fmt::format("{}: output '{}' has dims {}, the IR says {} = {}", where,
                                          v.name, dims_str(t.dims), ir::shape_to_string(v.shape),
                                          dims_str(want)));
      t.dtype = v.dtype;
      env[n.outputs[k]] = std::move(t);
    }
  }

  std::map<std::string, RefTensor> out;
  for (int id : g.outputs) {
    if (!env[id])
      return internal_error(fmt::format("output '{}' was not computed", g.values[id].name));
    out[g.values[id].name] = *env[id];
  }
  return out;
}

}  // namespace kiln::compiler
