#include "compiler/frontend/onnx_model_parse.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>

namespace kiln::compiler {
namespace {

constexpr int kRecursionLimit = 64;

}  // namespace

Result<onnx::ModelProto> onnx_parse_model(std::string_view bytes) {
  if (bytes.empty()) return invalid_argument("the model is empty");
  if (bytes.size() > kOnnxMaxModelBytes)
    return invalid_argument(fmt::format(
        "the model is {} bytes; protobuf cannot parse a single file over 2 GiB, so store the "
        "weights as external data",
        bytes.size()));
  onnx::ModelProto m;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(kRecursionLimit);
  if (!m.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    return invalid_argument(fmt::format(
        "not a valid ONNX ModelProto (corrupted, truncated, or nested more than {} messages deep)",
        kRecursionLimit));
  if (!m.has_graph()) return invalid_argument("not an ONNX model: it has no graph");
  return m;
}

}  // namespace kiln::compiler
