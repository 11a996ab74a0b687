// ONNX external tensor data (data_location EXTERNAL): the location is validated (relative, no
// "..", resolves under the model folder, no symlink or hard-link escape), offset and length are
// checked against the file, and only the bytes the tensor needs are read.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "cache/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::compiler {

// Reads the data of `t` (named `name` in messages). `expected_bytes` is numel * dtype size;
// a `length` key that disagrees with it is an error. Messages name the tensor and the file.
Result<std::vector<uint8_t>> external_data_read(const onnx::TensorProto& t, const std::string& name,
                                                const std::filesystem::path& base_dir,
                                                uint64_t expected_bytes);

}  // namespace kiln::compiler
