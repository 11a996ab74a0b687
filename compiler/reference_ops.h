// Float64 kernels of the CPU reference interpreter, one per op family. They take concrete
// tensors (dims already evaluated at a size) and check the dims they rely on.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "compiler/reference_interpreter.h"

namespace kiln::compiler {

// numpy matmul, including 1-D operands and batch broadcasting.
Result<RefTensor> ref_matmul(const RefTensor& a, const RefTensor& b);
// alpha * op(A) * op(B) + beta * C, C (optional, may be null) broadcast to [M, N].
Result<RefTensor> ref_gemm(const RefTensor& a, const RefTensor& b, const RefTensor* c, bool trans_a,
                           bool trans_b, double alpha, double beta);
// Add, Sub, Mul, Div with numpy broadcasting.
Result<RefTensor> ref_binary(std::string_view op, const RefTensor& a, const RefTensor& b);
// Relu, Sigmoid, Tanh.
Result<RefTensor> ref_unary(std::string_view op, const RefTensor& x);
// Softmax over one axis (opset-13 semantics), max-subtracted.
Result<RefTensor> ref_softmax(const RefTensor& x, int64_t axis);

// Broadcast dims of a and b (numpy rules); error when they do not broadcast.
Result<std::vector<int64_t>> ref_broadcast_dims(const std::vector<int64_t>& a,
                                                const std::vector<int64_t>& b);

}  // namespace kiln::compiler
