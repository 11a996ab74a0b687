// Runs a loaded model on the GPU and checks every output against the CPU reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <random>

#include "compiler/ir/ir.h"
#include "compiler/reference/reference_compare.h"
#include "kiln/executor.h"

namespace kiln::testing {

// Fresh random inputs at size `s`; every output must have exactly the size-`s` shape and match
// the reference within `tol` (NaN/Inf positions included).
::testing::AssertionResult run_matches_reference(Executor& ex, const Model& model,
                                                 const ir::Graph& reference, int64_t s,
                                                 compiler::Tolerance tol, std::mt19937& rng);

}  // namespace kiln::testing
