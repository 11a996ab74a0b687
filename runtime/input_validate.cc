#include "runtime/input_validate.h"

#include <map>
#include <optional>
#include <string>

#include "runtime/dim_math.h"

namespace kiln::runtime {
namespace {

std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Binds each given name to a spec; lists every unknown, duplicate and (when `all`) missing name.
Status names_bind(const std::vector<TensorInfo>& specs, const std::vector<std::string>& given,
                  const char* what, bool all, std::vector<size_t>* spec_of) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) index[specs[i].name] = i;
  std::vector<std::string> unknown, duplicate, missing, expected;
  std::vector<bool> seen(specs.size(), false);
  spec_of->assign(given.size(), 0);
  for (size_t g = 0; g < given.size(); ++g) {
    auto it = index.find(given[g]);
    if (it == index.end()) {
      unknown.push_back(given[g]);
    } else if (seen[it->second]) {
      duplicate.push_back(given[g]);
    } else {
      seen[it->second] = true;
      (*spec_of)[g] = it->second;
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    expected.push_back(specs[i].name);
    if (all && !seen[i]) missing.push_back(specs[i].name);
  }
  if (unknown.empty() && duplicate.empty() && missing.empty()) return Status::ok_status();
  const std::string w(what);
  std::string message;
  auto add = [&message](const std::string& part) {
    message += (message.empty() ? "" : "; ") + part;
  };
  if (!unknown.empty()) add("unknown " + w + "(s) " + quoted_list(unknown));
  if (!duplicate.empty()) add(w + "(s) given more than once " + quoted_list(duplicate));
  if (!missing.empty()) add("missing " + w + "(s) " + quoted_list(missing));
  return invalid_argument(message + " (the model's " + w + "s are " + quoted_list(expected) + ")");
}

// The S this input implies, or 0 when it has no size axis.
Result<int64_t> dims_check(const TensorInfo& spec, DType dtype, const std::vector<int64_t>& shape) {
  const std::string name = "input '" + spec.name + "'";
  if (dtype != spec.dtype)
    return invalid_argument(name + " is " + std::string(dtype_name(dtype)) +
                            ", the model expects " + std::string(dtype_name(spec.dtype)));
  if (shape.size() != spec.dims.size())
    return invalid_argument(name + " has " + std::to_string(shape.size()) +
                            " dims, the model expects " + std::to_string(spec.dims.size()));
  int64_t implied = 0;
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    const DimSpec& d = spec.dims[i];
    const int64_t got = shape[i];
    const std::string at = name + " dim " + std::to_string(i) + " is " + std::to_string(got);
    if (d.coef == 0) {
      if (got != d.offset)
        return invalid_argument(at + ", the model expects " + std::to_string(d.offset) +
                                " (shape " + shape_string(shape) + ")");
      continue;
    }
    schema::DimExpr e;
    e.set_coef(d.coef);
    e.set_offset(d.offset);
    auto diff = checked_add(got, -d.offset);
    if (d.coef < 0 || !diff || *diff % d.coef != 0 || *diff < 0)
      return invalid_argument(at + ", which is not " + dim_string(e) + " for any size S");
    implied = *diff / d.coef;
    if (implied < 1)
      return invalid_argument(at + ", which means size " + std::to_string(implied) + " (" +
                              dim_string(e) + "); sizes start at 1");
  }
  return implied;
}

std::optional<int64_t> shape_bytes(DType dtype, const std::vector<int64_t>& shape) {
  std::optional<int64_t> bytes = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape) bytes = bytes && d >= 0 ? checked_mul(*bytes, d) : std::nullopt;
  return bytes;
}

Status data_check(const Tensor& t) {
  auto bytes = shape_bytes(t.dtype, t.shape);
  if (bytes && static_cast<uint64_t>(*bytes) == t.data.size()) return Status::ok_status();
  return invalid_argument("input '" + t.name + "' holds " + std::to_string(t.data.size()) +
                          " bytes, its shape " + shape_string(t.shape) + " of " +
                          std::string(dtype_name(t.dtype)) + " needs " +
                          (bytes ? std::to_string(*bytes) : std::string("too many")));
}

Status data_check(const TensorView& t) {
  auto bytes = shape_bytes(t.dtype, t.shape);
  if (t.data == nullptr && (!bytes || *bytes != 0))
    return invalid_argument("input '" + t.name + "' has a null data pointer (shape " +
                            shape_string(t.shape) + ")");
  if (t.memory != Memory::kHost && t.memory != Memory::kDevice)
    return invalid_argument("input '" + t.name + "': memory is neither host nor device (" +
                            std::to_string(static_cast<int>(t.memory)) + ")");
  return Status::ok_status();
}

template <typename T>
Result<InputBindingOf<T>> validate(const std::vector<TensorInfo>& specs,
                                   const std::vector<T>& inputs, int64_t max_size) {
  InputBindingOf<T> binding;
  std::vector<std::string> names;
  names.reserve(inputs.size());
  for (const T& t : inputs) names.push_back(t.name);
  std::vector<size_t> spec_of;
  KILN_RETURN_IF_ERROR(names_bind(specs, names, "input", /*all=*/true, &spec_of));
  binding.by_input.assign(specs.size(), nullptr);
  for (size_t g = 0; g < inputs.size(); ++g) binding.by_input[spec_of[g]] = &inputs[g];
  std::string first;  // the input that first implied S
  int64_t size = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const T& t = *binding.by_input[i];
    KILN_ASSIGN_OR_RETURN(int64_t implied, dims_check(specs[i], t.dtype, t.shape));
    if (implied == 0) continue;
    if (size == 0) {
      size = implied;
      first = specs[i].name;
    } else if (implied != size) {
      return invalid_argument("input '" + first + "' implies size " + std::to_string(size) +
                              ", input '" + specs[i].name + "' implies size " +
                              std::to_string(implied));
    }
  }
  if (size > max_size)
    return invalid_argument("input '" + first + "' implies size " + std::to_string(size) +
                            ", above the model's max_size " + std::to_string(max_size));
  binding.size = size == 0 ? 1 : size;
  for (const T* t : binding.by_input) KILN_RETURN_IF_ERROR(data_check(*t));
  return binding;
}

}  // namespace

Result<InputBinding> inputs_validate(const std::vector<TensorInfo>& specs,
                                     const std::vector<Tensor>& inputs, int64_t max_size) {
  return validate(specs, inputs, max_size);
}

Result<ViewBinding> inputs_validate(const std::vector<TensorInfo>& specs,
                                    const std::vector<TensorView>& inputs, int64_t max_size) {
  return validate(specs, inputs, max_size);
}

std::optional<int64_t> tensor_bytes_at(const TensorInfo& info, int64_t s) {
  std::optional<int64_t> bytes = static_cast<int64_t>(dtype_size(info.dtype));
  for (const DimSpec& d : info.dims) {
    auto v = dim_eval(d.coef, d.offset, s);
    bytes = bytes && v && *v >= 0 ? checked_mul(*bytes, *v) : std::nullopt;
  }
  return bytes;
}

Result<std::vector<size_t>> outputs_validate(const std::vector<TensorInfo>& specs,
                                             const std::vector<OutputView>& outputs, int64_t s) {
  std::vector<std::string> names;
  names.reserve(outputs.size());
  for (const OutputView& o : outputs) names.push_back(o.name);
  std::vector<size_t> spec_of;
  KILN_RETURN_IF_ERROR(names_bind(specs, names, "output", /*all=*/false, &spec_of));
  for (size_t g = 0; g < outputs.size(); ++g) {
    const OutputView& o = outputs[g];
    const TensorInfo& info = specs[spec_of[g]];
    const std::string label = "output '" + o.name + "'";
    auto need = tensor_bytes_at(info, s);
    if (!need)
      return invalid_argument(label + ": byte size overflows at size " + std::to_string(s));
    if (o.memory != Memory::kHost && o.memory != Memory::kDevice)
      return invalid_argument(label + ": memory is neither host nor device (" +
                              std::to_string(static_cast<int>(o.memory)) + ")");
    if (static_cast<uint64_t>(*need) > o.capacity)
      return invalid_argument(label + " needs " + std::to_string(*need) + " bytes at size " +
                              std::to_string(s) + " (shape " + shape_string(info.shape_at(s)) +
                              " of " + std::string(dtype_name(info.dtype)) +
                              "), the buffer holds " + std::to_string(o.capacity));
    if (o.data == nullptr && *need > 0) return invalid_argument(label + " has a null data pointer");
  }
  return spec_of;
}

}  // namespace kiln::runtime
