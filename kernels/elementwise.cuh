// Elementwise op family: the scalar ops a generated fused elementwise kernel chains together.
// Codegen writes one kernel per fused group: a grid-stride loop over the output elements that
// loads each input (through its broadcast index), applies these ops in order and stores.
#pragma once

#include "common.cuh"

namespace kiln {

__device__ __forceinline__ float op_add(float a, float b) { return a + b; }
__device__ __forceinline__ float op_sub(float a, float b) { return a - b; }
__device__ __forceinline__ float op_mul(float a, float b) { return a * b; }
__device__ __forceinline__ float op_div(float a, float b) { return a / b; }
// fmaxf(NaN, 0) would return 0; ONNX Relu propagates NaN, so compare explicitly.
__device__ __forceinline__ float op_relu(float a) { return a < 0.0f ? 0.0f : a; }
__device__ __forceinline__ float op_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }
__device__ __forceinline__ float op_tanh(float a) { return tanhf(a); }
__device__ __forceinline__ float op_identity(float a) { return a; }

}  // namespace kiln
