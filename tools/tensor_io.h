// Tensor helpers for the CLI: ONNX TensorProto files in and out, seeded random inputs, and
// conversion to the reference interpreter's tensors.
#pragma once

#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>

#include "cache/status.h"
#include "compiler/reference/reference_interpreter.h"
#include "kiln/tensor.h"

namespace kiln::tools {

// Reads an ONNX TensorProto file (backend-test layout: input_0.pb ...), any kiln dtype.
Result<Tensor> tensor_read_pb(const std::filesystem::path& path);
// The same from a file's bytes; `where` names them in messages, external data resolves beneath
// `base_dir`.
Result<Tensor> tensor_parse_pb(std::string_view bytes, const std::string& where,
                               const std::filesystem::path& base_dir);

// Writes `t` as an ONNX TensorProto file (name, dims, data type, raw_data).
Status tensor_write_pb(const std::filesystem::path& path, const Tensor& t);

// Fresh values for `info` at size `s`: floats uniform in [-1, 1) (never zeros: they hide
// unwritten outputs), integers uniform in [0, int_high), bools 0/1.
Tensor tensor_random(const TensorInfo& info, int64_t s, std::mt19937& rng, int64_t int_high = 4);

// The tensor's values in float64 (any dtype).
compiler::RefTensor tensor_to_ref(const Tensor& t);

// Sum of all elements in double: a quick fingerprint to compare runs by eye.
double tensor_checksum(const Tensor& t);

}  // namespace kiln::tools
