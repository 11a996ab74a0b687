/* example_tensor.h — what the two example apps share about host arrays: deterministic input
 * values, reading any dtype as double (fp16 and bf16 included), printing, and safe file names.
 * Header-only, valid C and C++. */
#ifndef KILN_EXAMPLES_EXAMPLE_TENSOR_H_
#define KILN_EXAMPLES_EXAMPLE_TENSOR_H_

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "npy.h"

static inline int64_t example_numel(const npy_array* a) {
  int64_t n = 1;
  int32_t d;
  for (d = 0; d < a->rank; ++d) n *= a->shape[d];
  return n;
}

static inline size_t example_bytes(const npy_array* a) {
  return (size_t)example_numel(a) * kiln_dtype_size(a->dtype);
}

static inline double example_half(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const double mantissa = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0) return sign * ldexp(mantissa, -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * ldexp(mantissa + 1024.0, exponent - 25);
}

/* f rounded to the nearest fp16 (ties away from zero; enough for example inputs). */
static inline uint16_t example_to_half(float f) {
  const double magnitude = fabs(f);
  uint16_t h = 0;
  if (magnitude > 0) {
    int exponent;
    const double m = frexp(magnitude, &exponent); /* magnitude = m * 2^exponent, m in [0.5, 1) */
    int biased = exponent + 14;                   /* the fp16 exponent field */
    if (biased <= 0) {
      h = (uint16_t)lround(magnitude * 16777216.0); /* subnormal: units of 2^-24 */
    } else {
      long fraction = lround((m * 2.0 - 1.0) * 1024.0);
      if (fraction == 1024) fraction = 0, ++biased;
      h = biased >= 31 ? 0x7c00 : (uint16_t)((biased << 10) | fraction);
    }
  }
  return signbit(f) ? (uint16_t)(h | 0x8000) : h;
}

/* Element i of `a` as a double. */
static inline double example_value(const npy_array* a, int64_t i) {
  const unsigned char* p = (const unsigned char*)a->data;
  switch (a->dtype) {
    case KILN_DTYPE_F32: {
      float f;
      memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case KILN_DTYPE_F16: {
      uint16_t h;
      memcpy(&h, p + 2 * i, 2);
      return example_half(h);
    }
    case KILN_DTYPE_BF16: {
      uint16_t h;
      uint32_t bits;
      float f;
      memcpy(&h, p + 2 * i, 2);
      bits = (uint32_t)h << 16;
      memcpy(&f, &bits, 4);
      return f;
    }
    case KILN_DTYPE_F64: {
      double v;
      memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case KILN_DTYPE_I64: {
      int64_t v;
      memcpy(&v, p + 8 * i, 8);
      return (double)v;
    }
    case KILN_DTYPE_I32: {
      int32_t v;
      memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case KILN_DTYPE_I8:
      return (signed char)p[i];
    default:
      return p[i]; /* u8, bool */
  }
}

/* Allocates a->data for a->dtype and a->shape and fills it: integers (token ids, positions,
 * masks) (i % 7) + 1, floats 0.5 * sin(i + 1), bools true. Returns -1 for an unknown dtype. */
static inline int example_fill(npy_array* a) {
  const int64_t n = example_numel(a);
  int64_t i;
  unsigned char* p;
  a->bytes = example_bytes(a);
  if (a->bytes == 0 && n > 0) return -1;
  a->data = calloc(a->bytes ? a->bytes : 1, 1);
  if (!a->data) return -1;
  p = (unsigned char*)a->data;
  for (i = 0; i < n; ++i) {
    const double real = 0.5 * sin((double)(i + 1));
    const int64_t integer = (i % 7) + 1;
    switch (a->dtype) {
      case KILN_DTYPE_F32: {
        const float f = (float)real;
        memcpy(p + 4 * i, &f, 4);
        break;
      }
      case KILN_DTYPE_F64:
        memcpy(p + 8 * i, &real, 8);
        break;
      case KILN_DTYPE_F16:
      case KILN_DTYPE_BF16: {
        /* through float: bf16 keeps the top half; fp16 rounds onto its 10-bit mantissa */
        const float f = (float)real;
        uint32_t bits;
        uint16_t h;
        memcpy(&bits, &f, 4);
        h = a->dtype == KILN_DTYPE_BF16 ? (uint16_t)(bits >> 16) : example_to_half(f);
        memcpy(p + 2 * i, &h, 2);
        break;
      }
      case KILN_DTYPE_I64:
        memcpy(p + 8 * i, &integer, 8);
        break;
      case KILN_DTYPE_I32: {
        const int32_t v = (int32_t)integer;
        memcpy(p + 4 * i, &v, 4);
        break;
      }
      case KILN_DTYPE_I8:
      case KILN_DTYPE_U8:
        p[i] = (unsigned char)integer;
        break;
      case KILN_DTYPE_BOOL:
        p[i] = 1;
        break;
      default:
        return -1;
    }
  }
  return 0;
}

static inline void example_print_head(const npy_array* a, int64_t n) {
  int64_t i;
  for (i = 0; i < n && i < example_numel(a); ++i) printf(" %.6f", example_value(a, i));
}

static inline double example_sum(const npy_array* a) {
  double s = 0;
  int64_t i;
  for (i = 0; i < example_numel(a); ++i) s += example_value(a, i);
  return s;
}

/* Replaces every character outside [A-Za-z0-9._-] (a '/' or ':' in a tensor name) with '_'. */
static inline void example_safe_name(char* name) {
  for (; *name; ++name)
    if (!((*name >= 'a' && *name <= 'z') || (*name >= 'A' && *name <= 'Z') ||
          (*name >= '0' && *name <= '9') || *name == '.' || *name == '_' || *name == '-'))
      *name = '_';
}

#endif /* KILN_EXAMPLES_EXAMPLE_TENSOR_H_ */
