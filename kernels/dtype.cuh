// Storage types of generated kernels and their conversions to and from fp32, the type every
// kernel computes and accumulates in. NVRTC sees no system headers, so fp16 and bf16 are kiln's
// own 16-bit structs converted with PTX `cvt` (round to nearest even), not cuda_fp16.h.
//
// Codegen names element types by compiler::kernel_ctype(DType): float, kiln::f16, kiln::bf16,
// long long (int64), int (int32), unsigned char (bool and uint8), signed char (int8).
#pragma once

namespace kiln {

struct __align__(2) f16 {
  unsigned short bits;
};
struct __align__(2) bf16 {
  unsigned short bits;
};

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(f16 x) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
  return f;
}
__device__ __forceinline__ float to_f32(bf16 x) { return __uint_as_float(static_cast<unsigned>(x.bits) << 16); }
__device__ __forceinline__ float to_f32(long long x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_f32(int x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_f32(unsigned char x) { return static_cast<float>(x); }
__device__ __forceinline__ float to_f32(signed char x) { return static_cast<float>(x); }

// from_f32<T>(f): fp32 → storage type T. Integer targets truncate toward zero (ONNX Cast);
// bool stores f != 0.
template <typename T>
__device__ __forceinline__ T from_f32(float f);
template <>
__device__ __forceinline__ float from_f32<float>(float f) { return f; }
template <>
__device__ __forceinline__ f16 from_f32<f16>(float f) {
  f16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float f) {
  bf16 h;
  // cvt.rn.bf16.f32 needs sm_80, which is kiln's oldest target.
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.bits) : "f"(f));
  return h;
}
template <>
__device__ __forceinline__ long long from_f32<long long>(float f) { return static_cast<long long>(f); }
template <>
__device__ __forceinline__ int from_f32<int>(float f) { return static_cast<int>(f); }
template <>
__device__ __forceinline__ unsigned char from_f32<unsigned char>(float f) { return f != 0.0f ? 1 : 0; }
template <>
__device__ __forceinline__ signed char from_f32<signed char>(float f) { return static_cast<signed char>(f); }

// A packed group of N elements of T for 16-byte (or narrower) vector loads and stores. Use only
// where the address is aligned to sizeof(Vec<T, N>) — codegen checks base alignment (every
// buffer is 256-aligned) and that the row length is a multiple of N.
template <typename T, int N>
struct __align__(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

}  // namespace kiln
