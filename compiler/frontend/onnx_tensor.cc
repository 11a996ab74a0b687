#include "compiler/frontend/onnx_tensor.h"

#include <fmt/format.h>

#include <cstring>
#include <optional>
#include <string_view>
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

// The element count of t's dims (appended to `dims`), refusing negative dims and overflow.
Result<int64_t> checked_numel(const onnx::TensorProto& t, const std::string& name,
                              std::vector<int64_t>& dims) {
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) return invalid_argument(fmt::format("tensor '{}' has a negative dim {}", name, d));
    if (__builtin_mul_overflow(numel, d, &numel))
      return invalid_argument(fmt::format("tensor '{}': its dims overflow int64", name));
    dims.push_back(d);
  }
  return numel;
}

// numel elements of dtype, in bytes, refusing overflow.
Result<uint64_t> checked_nbytes(int64_t numel, DType dtype, const std::string& name) {
  const uint64_t esize = dtype_size(dtype);
  if (static_cast<uint64_t>(numel) > static_cast<uint64_t>(INT64_MAX) / esize)
    return invalid_argument(fmt::format("tensor '{}': its byte size overflows int64", name));
  return static_cast<uint64_t>(numel) * esize;
}

// An in-message field of a TensorProto that holds data.
struct DataField {
  const char* field;
  int count;  // elements (bytes for raw_data)
};

// The one in-message field holding t's data (nullopt when none does); an error when two do, or
// one does while the tensor is external.
Result<std::optional<DataField>> data_field(const onnx::TensorProto& t, const std::string& name,
                                            bool external) {
  const DataField fields[] = {
      {"raw_data", static_cast<int>(t.raw_data().size() > 0)},
      {"float_data", t.float_data_size()},
      {"double_data", t.double_data_size()},
      {"int32_data", t.int32_data_size()},
      {"int64_data", t.int64_data_size()},
      {"uint64_data", t.uint64_data_size()},
      {"string_data", t.string_data_size()},
  };
  std::optional<DataField> found;
  for (const DataField& f : fields) {
    if (f.count == 0) continue;
    if (found || external)
      return invalid_argument(fmt::format("tensor '{}' has data in both {} and {}", name,
                                          external ? "external data" : found->field, f.field));
    found = f;
  }
  return found;
}

// raw_data, which must hold exactly nbytes.
Status copy_raw_data(const onnx::TensorProto& t, const std::string& name, uint64_t nbytes,
                     OnnxConstant& r) {
  if (t.raw_data().size() != nbytes)
    return data_loss(fmt::format("tensor '{}': raw_data has {} bytes, its {} shape [{}] needs {}",
                                 name, t.raw_data().size(), dtype_name(r.dtype),
                                 fmt::join(r.constant.dims, ", "), nbytes));
  r.constant.bytes.assign(t.raw_data().begin(), t.raw_data().end());
  return Status::ok_status();
}

// The typed field for r.dtype (float_data, double_data, int64_data, else int32_data), which
// must be the one holding data and hold exactly numel values.
Status copy_typed_data(const onnx::TensorProto& t, const std::string& name, const DataField& found,
                       int64_t numel, OnnxConstant& r) {
  const std::string_view field = found.field;
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
  if (found.count != numel)
    return data_loss(fmt::format("tensor '{}': {} has {} values, its shape [{}] needs {}", name,
                                 field, found.count, fmt::join(r.constant.dims, ", "), numel));
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
      return unpack_int32_data(t, r.dtype, name, r.constant.bytes);
  }
  return Status::ok_status();
}

}  // namespace

Result<OnnxConstant> onnx_tensor_to_constant(const onnx::TensorProto& t, const std::string& name,
                                             const std::filesystem::path& base_dir,
                                             const TensorLimits& limits) {
  OnnxConstant r;
  KILN_ASSIGN_OR_RETURN(r.dtype, onnx_dtype(t.data_type(), fmt::format("tensor '{}'", name)));
  if (t.has_segment())
    return unimplemented(fmt::format("tensor '{}' is segmented, which is not supported", name));
  KILN_ASSIGN_OR_RETURN(const int64_t numel, checked_numel(t, name, r.constant.dims));
  KILN_ASSIGN_OR_RETURN(const uint64_t nbytes, checked_nbytes(numel, r.dtype, name));
  if (limits.max_bytes != 0 && nbytes > limits.max_bytes)
    return unimplemented(fmt::format(
        "{} '{}' holds {} bytes ({} [{}]), at most {} are supported; its data was not read",
        limits.kind, name, nbytes, dtype_name(r.dtype), fmt::join(r.constant.dims, ", "),
        limits.max_bytes));
  const bool external = t.data_location() == onnx::TensorProto::EXTERNAL;
  KILN_ASSIGN_OR_RETURN(const std::optional<DataField> found, data_field(t, name, external));
  if (external) {
    if (t.external_data_size() == 0)
      return invalid_argument(
          fmt::format("tensor '{}' is marked EXTERNAL but has no "
                      "external_data entries",
                      name));
    KILN_ASSIGN_OR_RETURN(r.constant.bytes,
                          external_data_read(t, name, base_dir, nbytes, limits.budget));
    return r;
  }
  if (!found) {
    if (numel != 0)
      return invalid_argument(
          fmt::format("tensor '{}' has no data (shape needs {} elements)", name, numel));
    return r;
  }
  if (std::string_view(found->field) == "raw_data") {
    KILN_RETURN_IF_ERROR(copy_raw_data(t, name, nbytes, r));
  } else {
    KILN_RETURN_IF_ERROR(copy_typed_data(t, name, *found, numel, r));
  }
  return r;
}

}  // namespace kiln::compiler
