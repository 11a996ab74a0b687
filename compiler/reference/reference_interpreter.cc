#include "compiler/reference/reference_interpreter.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "compiler/ir/op_registry.h"
#include "compiler/ops/op_util.h"

namespace kiln::compiler {

int64_t RefTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

namespace {

// Dims of `v` at size `s`; errors for negative dims or too many elements.
Result<std::vector<int64_t>> eval_dims(const ir::Value& v, int64_t s) {
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (const ir::DimExpr& d : v.shape) {
    int64_t x = 0;
    if (__builtin_mul_overflow(d.coef, s, &x) || __builtin_add_overflow(x, d.offset, &x) || x < 0)
      return invalid_argument(fmt::format("value '{}' {}: a dim is negative or overflows at S={}",
                                          v.name, ir::shape_to_string(v.shape), s));
    if (__builtin_mul_overflow(n, x, &n) || n > kRefMaxElements)
      return resource_exhausted(fmt::format("value '{}' {} has more than {} elements at S={}",
                                            v.name, ir::shape_to_string(v.shape), kRefMaxElements,
                                            s));
    dims.push_back(x);
  }
  return dims;
}

template <typename T>
T load(const uint8_t* p) {
  T x;
  std::memcpy(&x, p, sizeof(T));
  return x;
}

uint16_t double_to_half(double d) {
  // Through float (round to nearest even at float precision first; fine for a reference).
  const auto f = std::bit_cast<uint32_t>(static_cast<float>(d));
  const uint32_t sign = (f >> 16) & 0x8000;
  const int32_t exp = static_cast<int32_t>((f >> 23) & 0xff) - 127 + 15;
  uint32_t mant = f & 0x7fffff;
  if (((f >> 23) & 0xff) == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

uint16_t double_to_bf16(double d) {
  const auto f = std::bit_cast<uint32_t>(static_cast<float>(d));
  if ((f & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((f >> 16) | 0x40);  // NaN
  return static_cast<uint16_t>((f + 0x7fff + ((f >> 16) & 1)) >> 16);
}

// The elements of constant `v`: its dims' product, once its bytes are checked to hold exactly
// that many of its dtype.
Result<size_t> constant_elements(const ir::Value& v) {
  const size_t es = dtype_size(v.dtype);
  const auto n = static_cast<size_t>(RefTensor{v.dtype, v.constant->dims, {}}.numel());
  if (es == 0 || v.constant->bytes.size() != n * es)
    return internal_error(fmt::format("constant '{}' holds {} bytes for dims {} of {}", v.name,
                                      v.constant->bytes.size(), dims_to_string(v.constant->dims),
                                      dtype_name(v.dtype)));
  return n;
}

// Writes x at p; returns the byte after it.
template <typename T>
uint8_t* put(uint8_t* p, T x) {
  std::memcpy(p, &x, sizeof(T));
  return p + sizeof(T);
}

int64_t saturate_int(double v) {
  if (std::isnan(v)) return 0;
  if (v >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
  if (v <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(v);
}

// A symbolic constant evaluated at size s.
RefTensor eval_ints(const ir::Value& v, int64_t s) {
  RefTensor t;
  t.dtype = v.dtype;
  if (!v.shape.empty()) t.dims = {static_cast<int64_t>(v.ints->size())};
  for (const ir::DimExpr& d : *v.ints) t.data.push_back(static_cast<double>(d.eval(s)));
  return t;
}

}  // namespace

Result<std::vector<uint8_t>> reference_encode(const RefTensor& t, DType dtype) {
  std::vector<uint8_t> out(t.data.size() * dtype_size(dtype));
  uint8_t* p = out.data();
  for (double x : t.data) {
    switch (dtype) {
      case DType::kF32:
        p = put(p, static_cast<float>(x));
        break;
      case DType::kF64:
        p = put(p, x);
        break;
      case DType::kF16:
        p = put(p, double_to_half(x));
        break;
      case DType::kBF16:
        p = put(p, double_to_bf16(x));
        break;
      case DType::kI64:
        p = put(p, saturate_int(x));
        break;
      case DType::kI32:
        p = put(p, static_cast<int32_t>(saturate_int(x)));
        break;
      case DType::kI8:
        p = put(p, static_cast<int8_t>(saturate_int(x)));
        break;
      case DType::kU8:
        p = put(p, static_cast<uint8_t>(saturate_int(x)));
        break;
      case DType::kBool:
        p = put(p, static_cast<uint8_t>(x != 0.0 ? 1 : 0));
        break;
      default:
        return internal_error("reference_encode: no dtype");
    }
  }
  return out;
}

Result<std::vector<uint8_t>> reference_encode_f32_constant(const ir::Value& v, DType dtype) {
  if (v.dtype != DType::kF32)
    return internal_error(fmt::format("constant '{}' is {}, not f32", v.name, dtype_name(v.dtype)));
  if (dtype != DType::kF16 && dtype != DType::kBF16)
    return internal_error(fmt::format("reference_encode_f32_constant: to {}", dtype_name(dtype)));
  KILN_ASSIGN_OR_RETURN(const size_t n, constant_elements(v));
  std::vector<uint8_t> out(n * dtype_size(dtype));
  const uint8_t* in = v.constant->bytes.data();
  uint8_t* p = out.data();
  for (size_t i = 0; i < n; ++i, in += 4) {
    const double x = load<float>(in);  // exact: the same rounding as decode + reference_encode
    p = put(p, dtype == DType::kF16 ? double_to_half(x) : double_to_bf16(x));
  }
  return out;
}

std::optional<std::vector<ir::DimExpr>> reference_known_ints(const ir::Value& v) {
  if (v.constant) {
    Result<RefTensor> t = reference_decode_constant(v);
    if (!t.ok()) return std::nullopt;
    std::vector<ir::DimExpr> out;
    for (double x : t->data) out.push_back(ir::DimExpr::constant(ref_to_int(x)));
    return out;
  }
  if (v.producer < 0 && v.ints) return v.ints;
  return std::nullopt;
}

// Decodes constant bytes of `dtype` into doubles.
Result<RefTensor> reference_decode_constant(const ir::Value& v) {
  RefTensor t;
  t.dtype = v.dtype;
  t.dims = v.constant->dims;
  const size_t es = dtype_size(v.dtype);
  KILN_ASSIGN_OR_RETURN(const size_t n, constant_elements(v));
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
        t.data[i] = f16_bits_to_double(load<uint16_t>(p));
        break;
      case DType::kBF16:
        t.data[i] = bf16_bits_to_double(load<uint16_t>(p));
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

namespace {

Result<std::vector<RefTensor>> eval_node(const ir::Node& n,
                                         const std::vector<const RefTensor*>& in) {
  const OpDef* def = op_find(n.domain, n.op);
  if (!def || !def->ref)
    return unimplemented("the reference interpreter does not implement this op");
  return def->ref(n, in);
}

// The shared walk: `want[i]` marks values to compute (all when empty).
Result<std::vector<std::optional<RefTensor>>> run_graph(
    const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& inputs,
    const std::vector<char>& need) {
  if (size < 1) return invalid_argument(fmt::format("size {} must be >= 1", size));
  KILN_RETURN_IF_ERROR(ir::graph_verify(g));
  const bool all = need.empty();
  std::vector<std::optional<RefTensor>> env(g.values.size());
  std::vector<std::string> names;
  for (int id : g.inputs) {
    const ir::Value& v = g.values[id];
    names.push_back(v.name);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) {
      if (all || need[id]) return invalid_argument(fmt::format("missing input '{}'", v.name));
      continue;
    }
    const RefTensor& t = it->second;
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> want, eval_dims(v, size));
    if (t.dims != want)
      return invalid_argument(fmt::format(
          "input '{}' has dims {}, the graph expects {} = {} at S={}", v.name,
          dims_to_string(t.dims), ir::shape_to_string(v.shape), dims_to_string(want), size));
    if (t.dtype != v.dtype)
      return invalid_argument(fmt::format("input '{}' is {}, the graph expects {}", v.name,
                                          dtype_name(t.dtype), dtype_name(v.dtype)));
    if (static_cast<int64_t>(t.data.size()) != t.numel())
      return invalid_argument(fmt::format("input '{}' holds {} values, its dims {} need {}", v.name,
                                          t.data.size(), dims_to_string(t.dims), t.numel()));
    env[id] = t;
  }
  for (const auto& [name, t] : inputs)
    if (std::find(names.begin(), names.end(), name) == names.end())
      return invalid_argument(
          fmt::format("unknown input '{}' (graph inputs: {})", name, fmt::join(names, ", ")));
  for (size_t i = 0; i < g.values.size(); ++i) {
    if (!all && !need[i]) continue;
    const ir::Value& v = g.values[i];
    if (v.constant) {
      KILN_ASSIGN_OR_RETURN(env[i], reference_decode_constant(v));
    } else if (v.ints && v.producer == -1) {
      env[i] = eval_ints(v, size);
    }
  }

  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const ir::Node& n = g.nodes[ni];
    if (!all && std::none_of(n.outputs.begin(), n.outputs.end(), [&](int id) { return need[id]; }))
      continue;
    const std::string where = fmt::format("node '{}' ({})", n.name, n.qualified_op());
    if (n.op == "Constant" && n.domain.empty()) continue;  // its output already holds the data
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
                                          v.name, dims_to_string(t.dims),
                                          ir::shape_to_string(v.shape), dims_to_string(want)));
      t.dtype = v.dtype;
      env[n.outputs[k]] = std::move(t);
    }
  }
  return env;
}

}  // namespace

Result<std::map<std::string, RefTensor>> reference_run(
    const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& inputs) {
  KILN_ASSIGN_OR_RETURN(auto env, run_graph(g, size, inputs, {}));
  std::map<std::string, RefTensor> out;
  for (int id : g.outputs) {
    if (!env[id])
      return internal_error(fmt::format("output '{}' was not computed", g.values[id].name));
    out[g.values[id].name] = *env[id];
  }
  return out;
}

Result<std::map<int, RefTensor>> reference_run_values(
    const ir::Graph& g, int64_t size, const std::map<std::string, RefTensor>& inputs,
    const std::vector<int>& values) {
  const int nv = static_cast<int>(g.values.size());
  std::vector<char> need(g.values.size(), 0);
  std::vector<int> stack;
  for (int id : values) {
    if (id < 0 || id >= nv) return invalid_argument(fmt::format("value id {} out of range", id));
    stack.push_back(id);
  }
  while (!stack.empty()) {  // mark the wanted values and their ancestors
    const int id = stack.back();
    stack.pop_back();
    if (need[id]) continue;
    need[id] = 1;
    const int p = g.values[id].producer;
    if (p < 0 || p >= static_cast<int>(g.nodes.size())) continue;
    for (int o : g.nodes[p].outputs) need[o] = 1;
    for (int in : g.nodes[p].inputs)
      if (in >= 0 && !need[in]) stack.push_back(in);
  }
  KILN_ASSIGN_OR_RETURN(auto env, run_graph(g, size, inputs, need));
  std::map<int, RefTensor> out;
  for (int id : values) {
    if (!env[id])
      return internal_error(fmt::format("value '{}' was not computed", g.values[id].name));
    out[id] = *env[id];
  }
  return out;
}

}  // namespace kiln::compiler
