#include "compiler/autotune/output_agreement.h"

#include <algorithm>
#include <cmath>

namespace kiln::compiler {

OutputTolerance output_tolerance(DType t) {
  switch (t) {
    case DType::kF32:
      return {1e-4, 1e-3, 1e-5};
    case DType::kF16:
      return {2e-3, 1e-2, 0x1p-8};
    case DType::kBF16:
      return {1e-2, 4e-2, 0x1p-5};
    case DType::kF64:
      return {1e-9, 1e-9, 1e-12};
    default:
      return {0, 0, 0};  // integers and bools: exact
  }
}

int64_t first_disagreement(std::span<const double> got, std::span<const double> want,
                           const OutputTolerance& tol) {
  double squares = 0;
  int64_t finite = 0;
  for (double w : want)
    if (std::isfinite(w)) {
      squares += w * w;
      ++finite;
    }
  const double rms = finite > 0 ? std::sqrt(squares / static_cast<double>(finite)) : 0.0;
  const double slack = tol.atol + tol.scale_rtol * rms;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    if (std::isnan(a) || std::isnan(b)) {
      if (std::isnan(a) && std::isnan(b)) continue;
      return static_cast<int64_t>(i);
    }
    if (a == b) continue;  // infinities of one sign too
    if (std::isinf(a) || std::isinf(b) || !(std::abs(a - b) <= slack + tol.rtol * std::abs(b)))
      return static_cast<int64_t>(i);
  }
  return got.size() == want.size() ? -1 : static_cast<int64_t>(std::min(got.size(), want.size()));
}

}  // namespace kiln::compiler
