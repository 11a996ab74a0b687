#include "compiler/autotune/operand_fill.h"

#include <algorithm>
#include <cstring>

namespace kiln::compiler {
namespace {

// Exact 16-bit encodings of q/64 (|q| <= 64): every value has at most 7 significant bits.
uint16_t bf16_bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return static_cast<uint16_t>(b >> 16);
}
uint16_t f16_bits(float v) {
  if (v == 0.0f) return 0;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t sign = (b >> 31) << 15;
  const int32_t exp = static_cast<int32_t>((b >> 23) & 0xFF) - 127 + 15;
  const uint32_t mant = (b >> 13) & 0x3FF;
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | mant);
}

// Fills the rest of `out` with copies of its first `prefix` bytes, doubling what is filled each
// copy.
void repeat_prefix(std::vector<uint8_t>& out, size_t prefix) {
  for (size_t filled = prefix; filled > 0 && filled < out.size();) {
    const size_t n = std::min(filled, out.size() - filled);
    std::memcpy(out.data() + filled, out.data(), n);
    filled += n;
  }
}

}  // namespace

std::vector<uint8_t> autotune_random_bytes(DType dtype, int64_t count, std::mt19937& rng) {
  const size_t es = dtype_size(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(count) * es, 0);
  const bool is_float = dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 ||
                        dtype == DType::kF64;
  if (!is_float) return out;
  std::uniform_int_distribution<int> q(-64, 64);
  const int64_t drawn = std::min<int64_t>(count, kAutotuneRandomRun);
  for (int64_t i = 0; i < drawn; ++i) {
    const float v = static_cast<float>(q(rng)) / 64.0f;
    uint8_t* dst = out.data() + static_cast<size_t>(i) * es;
    if (dtype == DType::kF32) {
      std::memcpy(dst, &v, 4);
    } else if (dtype == DType::kF64) {
      const double d = v;
      std::memcpy(dst, &d, 8);
    } else {
      const uint16_t h = dtype == DType::kF16 ? f16_bits(v) : bf16_bits(v);
      std::memcpy(dst, &h, 2);
    }
  }
  repeat_prefix(out, static_cast<size_t>(drawn) * es);
  return out;
}

std::vector<uint8_t> autotune_ones_bytes(DType dtype, int64_t count) {
  const size_t es = dtype_size(dtype);
  std::vector<uint8_t> out(static_cast<size_t>(count) * es, 0);
  if (out.empty()) return out;
  if (dtype == DType::kF32) {
    const float one = 1.0f;
    std::memcpy(out.data(), &one, 4);
  } else if (dtype == DType::kF64) {
    const double one = 1.0;
    std::memcpy(out.data(), &one, 8);
  } else if (dtype == DType::kF16 || dtype == DType::kBF16) {
    const uint16_t one = dtype == DType::kF16 ? f16_bits(1.0f) : bf16_bits(1.0f);
    std::memcpy(out.data(), &one, 2);
  } else {
    out[0] = 1;  // integers and bools, little-endian
  }
  repeat_prefix(out, es);
  return out;
}

}  // namespace kiln::compiler
