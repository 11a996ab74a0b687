// Whether a launch candidate's output agrees with the default kernel's: the same computation in
// another order (another reduction split, another tile, tensor cores against CUDA cores),
// rounded to the output's dtype, on the tuner's operands (operand_fill.h).
//
// Element i agrees when |got - want| <= atol + rtol·|want| + scale_rtol·rms(want). The last
// term is what reordering a long sum costs: an output near 0 is often the difference of terms
// far larger than itself (a K = 768 product of operands in [-1, 1] has an RMS near 9), and a
// rounding of an intermediate (a norm prologue's normalised row, rounded to fp16 before the
// product) moves it by a small fraction of the sums' size, not of its own. A wrong kernel (a
// missing K step, another row, a lost bias) moves outputs by the sums' size.
#pragma once

#include <cstdint>
#include <span>

#include "cache/dtype.h"

namespace kiln::compiler {

struct OutputTolerance {
  double atol = 0, rtol = 0, scale_rtol = 0;
};

// Per dtype: fp16 rtol 1e-2 with 2^-8 of the RMS, bf16 (8 bits of mantissa) 4e-2 with 2^-5,
// fp32 1e-3 with 1e-5; integers and bools exact.
OutputTolerance output_tolerance(DType t);

// The index of the first element of `got` that departs from `want` (same length) by more than
// `tol`, or -1 when every element agrees. NaN agrees with NaN only, an infinity with the same
// infinity only; the RMS is over want's finite elements.
int64_t first_disagreement(std::span<const double> got, std::span<const double> want,
                           const OutputTolerance& tol);

}  // namespace kiln::compiler
