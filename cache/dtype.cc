#include "cache/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include "schemas/manifest.pb.h"

namespace kiln {

static_assert(static_cast<int>(DType::kF32) == schema::DTYPE_F32);
static_assert(static_cast<int>(DType::kF16) == schema::DTYPE_F16);
static_assert(static_cast<int>(DType::kBF16) == schema::DTYPE_BF16);
static_assert(static_cast<int>(DType::kF64) == schema::DTYPE_F64);
static_assert(static_cast<int>(DType::kI64) == schema::DTYPE_I64);
static_assert(static_cast<int>(DType::kI32) == schema::DTYPE_I32);
static_assert(static_cast<int>(DType::kI8) == schema::DTYPE_I8);
static_assert(static_cast<int>(DType::kU8) == schema::DTYPE_U8);
static_assert(static_cast<int>(DType::kBool) == schema::DTYPE_BOOL);

namespace {
struct DTypeInfo {
  DType type;
  std::size_t size;
  std::string_view name;
};
constexpr std::array<DTypeInfo, 9> kInfo = {{
    {DType::kF32, 4, "f32"},
    {DType::kF16, 2, "f16"},
    {DType::kBF16, 2, "bf16"},
    {DType::kF64, 8, "f64"},
    {DType::kI64, 8, "i64"},
    {DType::kI32, 4, "i32"},
    {DType::kI8, 1, "i8"},
    {DType::kU8, 1, "u8"},
    {DType::kBool, 1, "bool"},
}};
}  // namespace

std::size_t dtype_size(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i.size;
  return 0;
}

std::string_view dtype_name(DType t) {
  for (const auto& i : kInfo)
    if (i.type == t) return i.name;
  return "unspecified";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}

bool dtype_valid(int raw) {
  for (const auto& i : kInfo)
    if (static_cast<int>(i.type) == raw) return true;
  return false;
}

double f16_bits_to_double(uint16_t h) {
  const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(static_cast<double>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(static_cast<double>(mant | 0x400), exp - 25);
  }
  return sign ? -v : v;
}

double bf16_bits_to_double(uint16_t h) {
  return static_cast<double>(std::bit_cast<float>(static_cast<uint32_t>(h) << 16));
}

}  // namespace kiln
