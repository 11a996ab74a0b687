// A small builder for ONNX models in tests: inputs with symbolic or fixed dims, random or given
// initializers, nodes with attributes. Keeps test models in the test that uses them.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <variant>
#include <vector>

namespace kiln::testing {

using Dim = std::variant<int64_t, std::string>;  // 64 or "batch"
using Attr = std::variant<int64_t, float, std::vector<int64_t>>;

class OnnxBuilder {
 public:
  explicit OnnxBuilder(const std::string& name, int64_t opset = 17);

  OnnxBuilder& input(const std::string& name, const std::vector<Dim>& dims);
  // An input of another element type (onnx::TensorProto::INT64, BOOL, FLOAT16, ...).
  OnnxBuilder& typed_input(const std::string& name, int elem_type, const std::vector<Dim>& dims);
  OnnxBuilder& output(const std::string& name);  // float, shape left to inference
  OnnxBuilder& typed_output(const std::string& name, int elem_type);
  OnnxBuilder& int64_initializer(const std::string& name, const std::vector<int64_t>& dims,
                                 const std::vector<int64_t>& values);
  OnnxBuilder& initializer(const std::string& name, const std::vector<int64_t>& dims,
                           const std::vector<float>& values);
  // Values uniform in [lo, hi) from a fixed seed.
  OnnxBuilder& random_initializer(const std::string& name, const std::vector<int64_t>& dims,
                                  float lo = -1.0f, float hi = 1.0f, uint32_t seed = 7);
  OnnxBuilder& node(const std::string& op, const std::vector<std::string>& inputs,
                    const std::vector<std::string>& outputs,
                    const std::vector<std::pair<std::string, Attr>>& attrs = {});

  const onnx::ModelProto& proto() const { return model_; }
  std::string bytes() const;
  void save(const std::filesystem::path& path) const;

 private:
  onnx::ModelProto model_;
  int nodes_ = 0;
};

}  // namespace kiln::testing
