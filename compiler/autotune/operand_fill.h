// Operand data for timing candidates: values that behave like real activations (finite, mixed
// signs, no denormals) without a model to produce them.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "cache/dtype.h"

namespace kiln::compiler {

// Elements drawn at random before the data repeats: a tuner fills hundreds of MB of weights
// (a 32000 x 4096 embedding, an LM head), and drawing each element took seconds a decision.
// Timing does not depend on the values, and a candidate's output is compared with the default's
// on the same data.
inline constexpr int64_t kAutotuneRandomRun = int64_t{1} << 16;

// `count` elements of `dtype` as bytes: floats (f32, f16, bf16, f64) are multiples of 1/64 in
// [-1, 1], exact in every float type, the first kAutotuneRandomRun drawn from `rng` and then
// repeated; integers and bools are 0 (valid as indices and masks).
std::vector<uint8_t> autotune_random_bytes(DType dtype, int64_t count, std::mt19937& rng);

// `count` elements of `dtype`, each 1 (true for bools): an attention's key padding where every
// key is kept, the usual case (a mask of ones), which the zeros above would turn into every key
// excluded, a path real inputs seldom take.
std::vector<uint8_t> autotune_ones_bytes(DType dtype, int64_t count);

}  // namespace kiln::compiler
