// Comparing results with the float64 reference: |got - ref| <= atol + rtol * |ref|, NaN/Inf in
// the same positions. The tolerance table is tests/README.md's; per-op overrides live here only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/config.h"

namespace kiln::compiler {

struct Tolerance {
  double rtol = 0;
  double atol = 0;
};

Tolerance tolerance_elementwise(Precision p);
Tolerance tolerance_gemm(Precision p, int64_t k);  // K = reduction length
Tolerance tolerance_rotary(Precision p);  // rounded inputs into a cancelling two-term sum
Tolerance tolerance_end_to_end(Precision p);

struct Comparison {
  int64_t count = 0;
  int64_t mismatches = 0;  // elements outside tolerance (NaN/Inf placement included)
  int64_t first_mismatch = -1;
  double max_abs_error = 0;  // over finite pairs
  bool ok() const { return mismatches == 0; }
  std::string summary() const;  // "max|err| 2.4e-08, 0 of 96 outside tolerance"
};

Comparison compare_with_reference(const float* got, const std::vector<double>& ref, Tolerance tol);

}  // namespace kiln::compiler
