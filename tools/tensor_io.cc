#include "tools/tensor_io.h"

#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>
#include <sstream>

namespace kiln::tools {

Result<Tensor> tensor_read_pb(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(fmt::format("{}: cannot open tensor file", path.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes))
    return invalid_argument(fmt::format("{}: not an ONNX TensorProto", path.string()));
  if (proto.data_type() != onnx::TensorProto::FLOAT)
    return unimplemented(fmt::format("{}: tensor '{}' has ONNX data_type {}; only float is supported",
                                     path.string(), proto.name(), proto.data_type()));
  Tensor t;
  t.name = proto.name();
  t.dtype = DType::kF32;
  int64_t numel = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0 || (d > 0 && numel > (int64_t{1} << 40) / d))
      return invalid_argument(fmt::format("{}: tensor '{}' has a bad dim {}", path.string(), t.name, d));
    t.shape.push_back(d);
    numel *= d;
  }
  t.data.resize(static_cast<size_t>(numel) * 4);
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != t.data.size())
      return invalid_argument(fmt::format("{}: tensor '{}': raw_data has {} bytes, shape needs {}",
                                          path.string(), t.name, proto.raw_data().size(), t.data.size()));
    std::memcpy(t.data.data(), proto.raw_data().data(), t.data.size());
  } else {
    if (proto.float_data_size() != numel)
      return invalid_argument(fmt::format("{}: tensor '{}': {} floats, shape needs {}", path.string(),
                                          t.name, proto.float_data_size(), numel));
    std::memcpy(t.data.data(), proto.float_data().data(), t.data.size());
  }
  return t;
}

Tensor tensor_random(const TensorInfo& info, int64_t s, std::mt19937& rng) {
  Tensor t = Tensor::zeros(info.name, info.dtype, info.shape_at(s));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  float* p = t.as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

compiler::RefTensor tensor_to_ref(const Tensor& t) {
  compiler::RefTensor r;
  r.dtype = t.dtype;
  r.dims = t.shape;
  r.data.resize(static_cast<size_t>(t.numel()));
  const float* p = t.as<float>();
  for (size_t i = 0; i < r.data.size(); ++i) r.data[i] = p[i];
  return r;
}

double tensor_checksum(const Tensor& t) {
  double sum = 0;
  const float* p = t.as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) sum += p[i];
  return sum;
}

}  // namespace kiln::tools
