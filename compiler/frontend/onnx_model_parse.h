// Parsing an ONNX ModelProto from bytes, bounded: the size protobuf can parse, a nesting depth
// limit, and a graph. Kept apart from onnx_import.h so that users of the importer do not
// compile ONNX's protobuf headers.
#pragma once

#include <cstdint>
#include <string_view>

#include "cache/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::compiler {

// protobuf parses at most 2 GiB - 1 in one message.
inline constexpr uint64_t kOnnxMaxModelBytes = 0x7fffffff;

// Parses and structurally checks a ModelProto (size limit, nesting depth, has a graph); no
// import. `kiln inspect` uses it to list ops before importing.
Result<onnx::ModelProto> onnx_parse_model(std::string_view bytes);

}  // namespace kiln::compiler
