// ONNX TensorProto → ir::Constant, and ONNX element types → kiln::DType. Sizes are checked
// against the data actually present before anything is allocated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "cache/dtype.h"
#include "cache/status.h"
#include "compiler/frontend/onnx_external_data.h"
#include "compiler/ir/ir.h"
#include "onnx/onnx_pb.h"

namespace kiln::compiler {

// The kiln dtype of an ONNX TensorProto.DataType; unimplemented for types kiln has no dtype for.
// `what` names the tensor in the message.
Result<DType> onnx_dtype(int32_t elem_type, const std::string& what);

struct OnnxConstant {
  DType dtype = DType::kUnspecified;
  ir::Constant constant;
};

// Bounds on one tensor's data, checked from its shape and dtype before any data is read.
struct TensorLimits {
  uint64_t max_bytes = 0;                // 0: no cap of its own
  const char* kind = "tensor";           // what the cap is for, in its message ("tensor attribute")
  ExternalDataBudget* budget = nullptr;  // the import's external-data budget, if any
};

// Decodes typed fields, raw_data or external data (resolved from `base_dir`).
// `name` is used in messages.
Result<OnnxConstant> onnx_tensor_to_constant(const onnx::TensorProto& t, const std::string& name,
                                             const std::filesystem::path& base_dir,
                                             const TensorLimits& limits = {});

}  // namespace kiln::compiler
