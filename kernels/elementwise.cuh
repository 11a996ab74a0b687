// Elementwise op family: the scalar ops a generated fused elementwise kernel chains together.
// Codegen writes one kernel per fused group: a grid-stride loop over the output (one element,
// or a 16-byte vector of them, per step) that loads each input through its broadcast index,
// converts it to the compute type, applies these ops in order and stores.
//
// Compute types: float for f32/f16/bf16 values, long long for integers and bool (0/1), so that
// int64 arithmetic stays exact. Integer ops wrap like two's complement (as onnxruntime does).
#pragma once

#include "common.cuh"

namespace kiln {

// --- arithmetic ----------------------------------------------------------------------------------
__device__ __forceinline__ float op_add(float a, float b) { return a + b; }
__device__ __forceinline__ float op_sub(float a, float b) { return a - b; }
__device__ __forceinline__ float op_mul(float a, float b) { return a * b; }
__device__ __forceinline__ float op_div(float a, float b) { return a / b; }
// Through unsigned: signed overflow is undefined in C++, the ONNX result wraps.
__device__ __forceinline__ i64 op_add(i64 a, i64 b) {
  return static_cast<i64>(static_cast<unsigned long long>(a) + static_cast<unsigned long long>(b));
}
__device__ __forceinline__ i64 op_sub(i64 a, i64 b) {
  return static_cast<i64>(static_cast<unsigned long long>(a) - static_cast<unsigned long long>(b));
}
__device__ __forceinline__ i64 op_mul(i64 a, i64 b) {
  return static_cast<i64>(static_cast<unsigned long long>(a) * static_cast<unsigned long long>(b));
}
// Truncates toward zero; x / 0 is 0 here (the reference refuses it) and INT64_MIN / -1 wraps.
__device__ __forceinline__ i64 op_div(i64 a, i64 b) {
  if (b == 0) return 0;
  if (b == -1) return op_sub(0, a);
  return a / b;
}
__device__ __forceinline__ float op_pow(float a, float b) { return powf(a, b); }
// Integer power by squaring; a negative exponent truncates 1 / a^|b| toward zero.
__device__ __forceinline__ i64 op_pow(i64 a, i64 b) {
  if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
  i64 r = 1;
  while (b > 0) {
    if (b & 1) r = op_mul(r, a);
    a = op_mul(a, a);
    b >>= 1;
  }
  return r;
}
__device__ __forceinline__ float op_neg(float a) { return -a; }
__device__ __forceinline__ i64 op_neg(i64 a) { return op_sub(0, a); }
__device__ __forceinline__ float op_abs(float a) { return fabsf(a); }
__device__ __forceinline__ i64 op_abs(i64 a) { return a < 0 ? op_sub(0, a) : a; }
// NaN propagates, as numpy.maximum does (fmaxf would drop it).
__device__ __forceinline__ float op_max(float a, float b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}
__device__ __forceinline__ float op_min(float a, float b) {
  return (a != a || b != b) ? a + b : (a < b ? a : b);
}
__device__ __forceinline__ i64 op_max(i64 a, i64 b) { return a > b ? a : b; }
__device__ __forceinline__ i64 op_min(i64 a, i64 b) { return a < b ? a : b; }
// Clip(x, lo, hi) = min(max(x, lo), hi); NaN stays NaN.
__device__ __forceinline__ float op_clip(float x, float lo, float hi) {
  if (x != x) return x;
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}
__device__ __forceinline__ i64 op_clip(i64 x, i64 lo, i64 hi) {
  x = x < lo ? lo : x;
  return x > hi ? hi : x;
}

// --- float math ----------------------------------------------------------------------------------
__device__ __forceinline__ float op_sqrt(float a) { return sqrtf(a); }
__device__ __forceinline__ float op_reciprocal(float a) { return 1.0f / a; }
__device__ __forceinline__ float op_exp(float a) { return expf(a); }
__device__ __forceinline__ float op_log(float a) { return logf(a); }
__device__ __forceinline__ float op_erf(float a) { return erff(a); }
__device__ __forceinline__ float op_tanh(float a) { return tanhf(a); }
__device__ __forceinline__ float op_sin(float a) { return sinf(a); }
__device__ __forceinline__ float op_cos(float a) { return cosf(a); }
// Split by sign so that neither branch overflows expf.
__device__ __forceinline__ float op_sigmoid(float a) {
  if (a >= 0.0f) return 1.0f / (1.0f + expf(-a));
  const float e = expf(a);
  return e / (1.0f + e);
}
// fmaxf(NaN, 0) would return 0; ONNX Relu propagates NaN, so compare explicitly.
__device__ __forceinline__ float op_relu(float a) { return a < 0.0f ? 0.0f : a; }
__device__ __forceinline__ i64 op_relu(i64 a) { return a < 0 ? 0 : a; }
__device__ __forceinline__ float op_leaky_relu(float a, float alpha) { return a < 0.0f ? a * alpha : a; }
// ONNX Gelu, approximate = "none": x/2 (1 + erf(x / sqrt 2)).
__device__ __forceinline__ float op_gelu(float a) {
  return 0.5f * a * (1.0f + erff(a * 0.70710678118654752f));
}
// ONNX Gelu, approximate = "tanh".
__device__ __forceinline__ float op_gelu_tanh(float a) {
  const float k = 0.79788456080286536f;  // sqrt(2 / pi)
  return 0.5f * a * (1.0f + tanhf(k * (a + 0.044715f * a * a * a)));
}
__device__ __forceinline__ float op_identity(float a) { return a; }
__device__ __forceinline__ i64 op_identity(i64 a) { return a; }

// --- comparisons and logic (bool results are 0 / 1) --------------------------------------------
template <typename T>
__device__ __forceinline__ i64 op_equal(T a, T b) { return a == b ? 1 : 0; }
template <typename T>
__device__ __forceinline__ i64 op_less(T a, T b) { return a < b ? 1 : 0; }
template <typename T>
__device__ __forceinline__ i64 op_less_equal(T a, T b) { return a <= b ? 1 : 0; }
template <typename T>
__device__ __forceinline__ i64 op_greater(T a, T b) { return a > b ? 1 : 0; }
template <typename T>
__device__ __forceinline__ i64 op_greater_equal(T a, T b) { return a >= b ? 1 : 0; }
__device__ __forceinline__ i64 op_and(i64 a, i64 b) { return (a != 0 && b != 0) ? 1 : 0; }
__device__ __forceinline__ i64 op_or(i64 a, i64 b) { return (a != 0 || b != 0) ? 1 : 0; }
__device__ __forceinline__ i64 op_xor(i64 a, i64 b) { return ((a != 0) != (b != 0)) ? 1 : 0; }
__device__ __forceinline__ i64 op_not(i64 a) { return a == 0 ? 1 : 0; }
__device__ __forceinline__ i64 op_is_nan(float a) { return a != a ? 1 : 0; }
// IsInf: pos / neg are 1 or 0 (the detect_positive / detect_negative attributes).
__device__ __forceinline__ i64 op_is_inf(float a, float pos, float neg) {
  return (a == __int_as_float(0x7f800000) && pos != 0.0f) ||
                 (a == __int_as_float(0xff800000) && neg != 0.0f)
             ? 1
             : 0;
}
template <typename T>
__device__ __forceinline__ T op_where(i64 c, T a, T b) { return c != 0 ? a : b; }

// --- conversions between compute types ----------------------------------------------------------
// float → integer as the reference does: NaN → 0, saturate, else truncate toward zero.
__device__ __forceinline__ i64 f32_to_i64(float f) {
  if (f != f) return 0;
  if (f >= 9.2233720368547758e18f) return 0x7fffffffffffffffLL;
  if (f <= -9.2233720368547758e18f) return -0x7fffffffffffffffLL - 1;
  return static_cast<i64>(f);
}
__device__ __forceinline__ i64 wrap_i32(i64 v) { return static_cast<int>(static_cast<unsigned>(v)); }
__device__ __forceinline__ i64 wrap_i8(i64 v) { return static_cast<signed char>(v & 0xff); }
__device__ __forceinline__ i64 wrap_u8(i64 v) { return static_cast<i64>(v & 0xff); }

// Loads and stores of one element in its compute type.
template <typename T>
__device__ __forceinline__ float ew_load_f(T x) { return to_f32(x); }
template <typename T>
__device__ __forceinline__ i64 ew_load_i(T x) { return static_cast<i64>(x); }
template <typename T>
__device__ __forceinline__ T ew_store_f(float v) { return from_f32<T>(v); }
template <typename T>
__device__ __forceinline__ T ew_store_i(i64 v) { return static_cast<T>(v); }
template <>
__device__ __forceinline__ unsigned char ew_store_i<unsigned char>(i64 v) {
  return static_cast<unsigned char>(v & 0xff);
}

}  // namespace kiln
