// kiln::DType: element types, shared by the compiler, the cache and the runtime.
// Numeric values equal schema::DType's so conversion is a cast (checked in dtype.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : int {
  kUnspecified = 0,
  kF32 = 1,
  kF16 = 2,
  kBF16 = 3,
  kF64 = 4,
  kI64 = 5,
  kI32 = 6,
  kI8 = 7,
  kU8 = 8,
  kBool = 9,
};

// Bytes per element; 0 for kUnspecified.
std::size_t dtype_size(DType t);
// "f32", "f16", ...
std::string_view dtype_name(DType t);
// Accepts the names dtype_name returns.
std::optional<DType> dtype_from_name(std::string_view name);
// Exact conversions of one IEEE half (f16) or bfloat16 value's bits (NaN and infinities kept).
double f16_bits_to_double(uint16_t h);
double bf16_bits_to_double(uint16_t h);
// True for a valid, specified dtype (used to validate untrusted manifests).
bool dtype_valid(int raw);

}  // namespace kiln
