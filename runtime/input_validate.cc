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

Status names_check(const std::vector<TensorInfo>& specs, const std::vector<Tensor>& inputs,
                   std::vector<const Tensor*>& by_input) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) index[specs[i].name] = i;
  std::vector<std::string> unknown, duplicate, missing, expected;
  by_input.assign(specs.size(), nullptr);
  for (const Tensor& t : inputs) {
    auto it = index.find(t.name);
    if (it == index.end()) {
      unknown.push_back(t.name);
    } else if (by_input[it->second] != nullptr) {
      duplicate.push_back(t.name);
    } else {
      by_input[it->second] = &t;
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    expected.push_back(specs[i].name);
    if (by_input[i] == nullptr) missing.push_back(specs[i].name);
  }
  if (unknown.empty() && duplicate.empty() && missing.empty()) return Status::ok_status();
  std::string message;
  auto add = [&message](const std::string& part) {
    message += (message.empty() ? "" : "; ") + part;
  };
  if (!unknown.empty()) add("unknown input(s) " + quoted_list(unknown));
  if (!duplicate.empty()) add("input(s) given more than once " + quoted_list(duplicate));
  if (!missing.empty()) add("missing input(s) " + quoted_list(missing));
  return invalid_argument(message + " (the model's inputs are " + quoted_list(expected) + ")");
}

// The S this input implies, or 0 when it has no size axis.
Result<int64_t> dims_check(const TensorInfo& spec, const Tensor& t) {
  const std::string name = "input '" + spec.name + "'";
  if (t.dtype != spec.dtype)
    return invalid_argument(name + " is " + std::string(dtype_name(t.dtype)) +
                            ", the model expects " + std::string(dtype_name(spec.dtype)));
  if (t.shape.size() != spec.dims.size())
    return invalid_argument(name + " has " + std::to_string(t.shape.size()) +
                            " dims, the model expects " + std::to_string(spec.dims.size()));
  int64_t implied = 0;
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    const DimSpec& d = spec.dims[i];
    const int64_t got = t.shape[i];
    const std::string at = name + " dim " + std::to_string(i) + " is " + std::to_string(got);
    if (d.coef == 0) {
      if (got != d.offset)
        return invalid_argument(at + ", the model expects " + std::to_string(d.offset) +
                                " (shape " + shape_string(t.shape) + ")");
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

}  // namespace

Result<InputBinding> inputs_validate(const std::vector<TensorInfo>& specs,
                                     const std::vector<Tensor>& inputs, int64_t max_size) {
  InputBinding binding;
  KILN_RETURN_IF_ERROR(names_check(specs, inputs, binding.by_input));
  std::string first;  // the input that first implied S
  int64_t size = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(int64_t implied, dims_check(specs[i], *binding.by_input[i]));
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
  for (size_t i = 0; i < specs.size(); ++i) {
    const Tensor& t = *binding.by_input[i];
    std::optional<int64_t> bytes = static_cast<int64_t>(dtype_size(t.dtype));
    for (int64_t d : t.shape) bytes = bytes && d >= 0 ? checked_mul(*bytes, d) : std::nullopt;
    if (!bytes || static_cast<uint64_t>(*bytes) != t.data.size())
      return invalid_argument("input '" + t.name + "' holds " + std::to_string(t.data.size()) +
                              " bytes, its shape " + shape_string(t.shape) + " of " +
                              std::string(dtype_name(t.dtype)) + " needs " +
                              (bytes ? std::to_string(*bytes) : std::string("too many")));
  }
  return binding;
}

}  // namespace kiln::runtime
