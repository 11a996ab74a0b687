// Operand data for timing candidates: values that behave like real activations (finite, mixed
// signs, no denormals) without a model to produce them.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "cache/dtype.h"

namespace kiln::compiler {

// `count` elements of `dtype` as bytes: floats (f32, f16, bf16, f64) are multiples of 1/64 in
// [-1, 1], exact in every float type; integers and bools are 0 (valid as indices and masks).
std::vector<uint8_t> autotune_random_bytes(DType dtype, int64_t count, std::mt19937& rng);

}  // namespace kiln::compiler
