#include "compiler/reference/reference_compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kiln::compiler {

Tolerance tolerance_elementwise(Precision p) {
  switch (p) {
    case Precision::kF32:
    case Precision::kTF32:
      return {1.3e-6, 1e-5};
    case Precision::kF16:
      return {1e-3, 1e-5};
    case Precision::kBF16:
      return {1.6e-2, 1e-5};
  }
  return {};
}

// Rotary embedding: x and the cos/sin tables are rounded to the compute dtype before a two-term
// sum that can cancel, so the error scales with |x|·|cos| (inputs in [-1, 1)), not with the
// result: an absolute tolerance of about two units of roundoff. fp32 is elementwise.
Tolerance tolerance_rotary(Precision p) {
  switch (p) {
    case Precision::kF16:
      return {1e-3, 2e-3};
    case Precision::kBF16:
      return {1.6e-2, 1.6e-2};
    default:
      return tolerance_elementwise(p);
  }
}

Tolerance tolerance_gemm(Precision p, int64_t k) {
  const double scale = std::max(1.0, static_cast<double>(k) / 2048.0);
  switch (p) {
    case Precision::kF32:
      return {1e-5, 1e-5 * scale};
    case Precision::kTF32:
      return {5e-3, 5e-3 * scale};
    case Precision::kF16:
      return {2e-3, 2e-3 * scale};
    case Precision::kBF16:
      return {1.6e-2, 1e-2 * scale};
  }
  return {};
}

Tolerance tolerance_end_to_end(Precision p) {
  switch (p) {
    case Precision::kF32:
      return {1e-3, 1e-5};
    case Precision::kTF32:
      return {1e-2, 1e-3};
    case Precision::kF16:
      return {1e-2, 1e-3};
    case Precision::kBF16:
      return {3e-2, 1e-2};
  }
  return {};
}

std::string Comparison::summary() const {
  return fmt::format("max|err| {:.3g}, {} of {} outside tolerance", max_abs_error, mismatches,
                     count);
}

Comparison compare_with_reference(const float* got, const std::vector<double>& ref, Tolerance tol) {
  Comparison c;
  c.count = static_cast<int64_t>(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got[i], r = ref[i];
    bool ok;
    if (std::isnan(r) || std::isnan(g)) {
      ok = std::isnan(r) && std::isnan(g);
    } else if (std::isinf(r) || std::isinf(g)) {
      ok = g == r;
    } else {
      const double err = std::fabs(g - r);
      c.max_abs_error = std::max(c.max_abs_error, err);
      ok = err <= tol.atol + tol.rtol * std::fabs(r);
    }
    if (!ok) {
      if (c.first_mismatch < 0) c.first_mismatch = static_cast<int64_t>(i);
      ++c.mismatches;
    }
  }
  return c;
}

}  // namespace kiln::compiler
