#include "compiler/frontend/onnx_tensor.h"

#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "compiler/frontend/onnx_external_data.h"

namespace kiln::compiler {

Result<DType> onnx_dtype(int32_t elem_type, const std::string& what) {
  using TP = onnx::TensorProto;
  switch (elem_type) {
    case TP::FLOAT:
      return DType::kF32;
    case TP::FLOAT16:
      return DType::kF16;
    case TP::BFLOAT16:
      return DType::kBF16;
    case TP::DOUBLE:
      return DType::kF64;
    case TP::INT64:
      return DType::kI64;
    case TP::INT32:
      return DType::kI32;
    case TP::INT8:
      return DType::kI8;
    case TP::UINT8:
      return DType::kU8;
    case TP::BOOL:
      return DType::kBool;
    case TP::UNDEFINED:
      return invalid_argument(fmt::format("{} has no element type", what));
    default:
      break;
  }
  const std::string type_name = TP::DataType_IsValid(elem_type)
                                    ? TP::DataType_Name(static_cast<TP::DataType>(elem_type))
                                    : fmt::format("unknown type {}", elem_type);
  return unimplemented(
      fmt::format("{} has element type {}, which kiln does not support", what, type_name));
}

namespace {

// Copies int32_data into `out` as `dtype` elements, checking each value's range.
Status unpack_int32_data(const onnx::TensorProto& t, DType dtype, const std::string& name,
                         std::vector<uint8_t>& out) {
  int64_t lo = 0, hi = 0;
  switch (dtype) {
    case DType::kI32:
      lo = INT32_MIN, hi = INT32_MAX;
      break;
    case DType::kI8:
      lo = -128, hi = 127;
      break;
    case DType::kU8:
      lo = 0, hi = 255;
      break;
    case DType::kBool:
      lo = 0, hi = 1;
      break;
    case DType::kF16:
    case DType::kBF16:
      lo = 0, hi = 65535;
      break;  // the bit pattern
    default:
      return internal_error("unpack_int32_data: unexpected dtype");
  }
  const size_t esize = dtype_size(dtype);
  out.resize(static_cast<size_t>(t.int32_data_size()) * esize);
  for (int i = 0; i < t.int32_data_size(); ++i) {
    const int64_t v = t.int32_data(i);
    if (v < lo || v > hi)
      return invalid_argument(fmt::format("tensor '{}': int32_data[{}] = {} does not fit {}", name,
                                          i, v, dtype_name(dtype)));
    if (dtype == DType::kI32) {
      const auto x = static_cast<int32_t>(v);
      std::memcpy(&out[i * esize], &x, esize);
    } else if (esize == 2) {
      const auto x = static_cast<uint16_t>(v);
      std::memcpy(&out[i * esize], &x, esize);
    } else {
      out[i] = static_cast<uint8_t>(static_cast<int8_t>(v));
    }
  }
  return Status::ok_status();
}

template <typename Field>
std::vector<uint8_t> copy_field(const Field& f) {
  std::vector<uint8_t> out(static_cast<size_t>(f.size()) * sizeof(f.Get(0)));
  if (!out.empty()) std::memcpy(out.data(), f.data(), out.size());
  return out;
}

}  // namespace

Result<OnnxConstant> onnx_tensor_to_constant(const onnx::TensorProto& t, const std::string& name,
                                             const std::filesystem::path& base_dir) {
  using TP = onnx::TensorProto;
  OnnxConstant r;
  KILN_ASSIGN_OR_RETURN(r.dtype, onnx_dtype(t.data_type(), fmt::format("tensor '{}'", name)));
  if (t.has_segment())
    return unimplemented(fmt::format("tensor '{}' is segmented, which is not supported", name));
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return invalid_argument(fmt::format("tensor '{}' has a negative dim {}", name, d));
    if (__builtin_mul_overflow(numel, d, &numel))
      return invalid_argument(fmt::format("tensor '{}': its dims overflow int64", name));
    r.constant.dims.push_back(d);
  }
  const uint64_t esize = dtype_size(r.dtype);
  if (static_cast<uint64_t>(numel) > static_cast<uint64_t>(INT64_MAX) / esize)
    return invalid_argument(fmt::format("tensor '{}': its byte size overflows int64", name));
  const uint64_t nbytes = static_cast<uint64_t>(numel) * esize;

  const bool external = t.data_location() == TP::EXTERNAL;
  struct Source {
    const char* field;
    int count;  // elements (bytes for raw_data)
  };
  const Source sources[] = {
      {"raw_data", static_cast<int>(t.raw_data().size() > 0)},
      {"float_data", t.float_data_size()},
      {"double_data", t.double_data_size()},
      {"int32_data", t.int32_data_size()},
      {"int64_data", t.int64_data_size()},
      {"uint64_data", t.uint64_data_size()},
      {"string_data", t.string_data_size()},
  };
  const Source* found = nullptr;
  for (const Source& s : sources) {
    if (s.count == 0) continue;
    if (found || external)
      return invalid_argument(fmt::format("tensor '{}' has data in both {} and {}", name,
                                          external ? "external data" : found->field, s.field));
    found = &s;
  }
  if (external) {
    if (t.external_data_size() == 0)
      return invalid_argument(
          fmt::format("tensor '{}' is marked EXTERNAL but has no "
                      "external_data entries",
                      name));
    KILN_ASSIGN_OR_RETURN(r.constant.bytes, external_data_read(t, name, base_dir, nbytes));
    return r;
  }
  if (!found) {
    if (numel != 0)
      return invalid_argument(
          fmt::format("tensor '{}' has no data (shape needs {} elements)", name, numel));
    return r;
  }
  const std::string_view field = found->field;
  if (field == "raw_data") {
    if (t.raw_data().size() != nbytes)
      return data_loss(fmt::format("tensor '{}': raw_data has {} bytes, its {} shape [{}] needs {}",
                                   name, t.raw_data().size(), dtype_name(r.dtype),
                                   fmt::join(r.constant.dims, ", "), nbytes));
    r.constant.bytes.assign(t.raw_data().begin(), t.raw_data().end());
    return r;
  }
  const char* expected = nullptr;
  switch (r.dtype) {
    case DType::kF32:
      expected = "float_data";
      break;
    case DType::kF64:
      expected = "double_data";
      break;
    case DType::kI64:
      expected = "int64_data";
      break;
    default:
      expected = "int32_data";
      break;
  }
  if (field != expected)
    return invalid_argument(fmt::format("tensor '{}' is {} but stores its data in {} (expected {})",
                                        name, dtype_name(r.dtype), field, expected));
  if (found->count != numel)
    return data_loss(fmt::format("tensor '{}': {} has {} values, its shape [{}] needs {}", name,
                                 field, found->count, fmt::join(r.constant.dims, ", "), numel));
  switch (r.dtype) {
    case DType::kF32:
      r.constant.bytes = copy_field(t.float_data());
      break;
    case DType::kF64:
      r.constant.bytes = copy_field(t.double_data());
      break;
    case DType::kI64:
      r.constant.bytes = copy_field(t.int64_data());
      break;
    default:
      KILN_RETURN_IF_ERROR(unpack_int32_data(t, r.dtype, name, r.constant.bytes));
      break;
  }
  return r;
}

}  // namespace kiln::compiler
