#include "tools/tensor_io.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <fstream>
#include <sstream>

#include "compiler/frontend/onnx_tensor.h"

namespace kiln::tools {

Result<Tensor> tensor_read_pb(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return not_found(fmt::format("{}: no such file (or not a regular file)", path.string()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open tensor file", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return tensor_parse_pb(ss.str(), path.string(), path.parent_path());
}

Result<Tensor> tensor_parse_pb(std::string_view bytes, const std::string& where,
                               const std::filesystem::path& base_dir) {
  onnx::TensorProto proto;
  if (bytes.size() > static_cast<size_t>(INT_MAX) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return invalid_argument(fmt::format("{}: not an ONNX TensorProto", where));
  KILN_ASSIGN_OR_RETURN(compiler::OnnxConstant c,
                        compiler::onnx_tensor_to_constant(
                            proto, where + ": tensor '" + proto.name() + "'", base_dir));
  Tensor t;
  t.name = proto.name();
  t.dtype = c.dtype;
  t.shape = c.constant.dims;
  t.data = std::move(c.constant.bytes);
  return t;
}

Status tensor_write_pb(const std::filesystem::path& path, const Tensor& t) {
  static const std::pair<DType, onnx::TensorProto_DataType> kTypes[] = {
      {DType::kF32, onnx::TensorProto_DataType_FLOAT},
      {DType::kF16, onnx::TensorProto_DataType_FLOAT16},
      {DType::kBF16, onnx::TensorProto_DataType_BFLOAT16},
      {DType::kF64, onnx::TensorProto_DataType_DOUBLE},
      {DType::kI64, onnx::TensorProto_DataType_INT64},
      {DType::kI32, onnx::TensorProto_DataType_INT32},
      {DType::kI8, onnx::TensorProto_DataType_INT8},
      {DType::kU8, onnx::TensorProto_DataType_UINT8},
      {DType::kBool, onnx::TensorProto_DataType_BOOL}};
  onnx::TensorProto proto;
  proto.set_name(t.name);
  for (int64_t d : t.shape) proto.add_dims(d);
  for (const auto& [dtype, onnx_type] : kTypes)
    if (dtype == t.dtype) proto.set_data_type(onnx_type);
  if (proto.data_type() == onnx::TensorProto_DataType_UNDEFINED)
    return invalid_argument(fmt::format("tensor '{}': {} has no ONNX data type", t.name,
                                        std::string(dtype_name(t.dtype))));
  proto.set_raw_data(t.data.data(), t.data.size());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !proto.SerializeToOstream(&out))
    return io_error(fmt::format("{}: cannot write", path.string()));
  return Status::ok_status();
}

Tensor tensor_random(const TensorInfo& info, int64_t s, std::mt19937& rng, int64_t int_high) {
  compiler::RefTensor r;
  r.dtype = info.dtype;
  r.dims = info.shape_at(s);
  r.data.resize(static_cast<size_t>(r.numel()));
  const bool is_float =
      info.dtype == DType::kF32 || info.dtype == DType::kF16 || info.dtype == DType::kBF16 ||
      info.dtype == DType::kF64;
  std::uniform_real_distribution<double> real(-1.0, 1.0);
  std::uniform_int_distribution<int64_t> integer(0, std::max<int64_t>(int_high, 1) - 1);
  for (double& x : r.data)
    x = info.dtype == DType::kBool ? static_cast<double>(integer(rng) & 1)
        : is_float                 ? real(rng)
                                   : static_cast<double>(integer(rng));
  Tensor t = Tensor::zeros(info.name, info.dtype, r.dims);
  auto bytes = compiler::reference_encode(r, info.dtype);
  if (bytes.ok() && bytes->size() == t.data.size()) t.data = std::move(*bytes);
  return t;
}

compiler::RefTensor tensor_to_ref(const Tensor& t) {
  ir::Value v;
  v.name = t.name;
  v.dtype = t.dtype;
  for (int64_t d : t.shape) v.shape.push_back(ir::DimExpr::constant(d));
  v.constant = ir::Constant{t.shape, t.data};
  auto r = compiler::reference_decode_constant(v);
  if (!r.ok()) return compiler::RefTensor{t.dtype, t.shape, {}};
  return std::move(*r);
}

double tensor_checksum(const Tensor& t) {
  double sum = 0;
  for (double x : tensor_to_ref(t).data) sum += x;
  return sum;
}

}  // namespace kiln::tools
