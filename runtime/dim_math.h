// Overflow-checked arithmetic on the manifest's linear dims (value = coef * S + offset).
// Everything the runtime computes from untrusted numbers goes through these.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "schemas/manifest.pb.h"

namespace kiln::runtime {

inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// coef * s + offset; nullopt on overflow.
inline std::optional<int64_t> dim_eval(int64_t coef, int64_t offset, int64_t s) {
  auto cs = checked_mul(coef, s);
  if (!cs) return std::nullopt;
  return checked_add(*cs, offset);
}

inline std::optional<int64_t> dim_eval(const schema::DimExpr& d, int64_t s) {
  return dim_eval(d.coef(), d.offset(), s);
}

// Product of the dims at s; nullopt on overflow or when a dim is negative.
template <typename Dims>
std::optional<int64_t> dims_numel(const Dims& dims, int64_t s) {
  int64_t n = 1;
  for (const auto& d : dims) {
    auto v = dim_eval(d, s);
    if (!v || *v < 0) return std::nullopt;
    auto p = checked_mul(n, *v);
    if (!p) return std::nullopt;
    n = *p;
  }
  return n;
}

// "4*S+1", "S", "128"
inline std::string dim_string(const schema::DimExpr& d) {
  if (d.coef() == 0) return std::to_string(d.offset());
  std::string s = d.coef() == 1 ? "S" : std::to_string(d.coef()) + "*S";
  if (d.offset() > 0) s += "+" + std::to_string(d.offset());
  if (d.offset() < 0) s += std::to_string(d.offset());
  return s;
}

}  // namespace kiln::runtime
