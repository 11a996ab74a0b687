#include "cache/dtype.h"

#include <array>

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

}  // namespace kiln
