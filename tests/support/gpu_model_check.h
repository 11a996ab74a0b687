// GPU kernel-family checks through the whole pipeline: build a small ONNX model in code, compile
// it with a given precision and sizes, load it, run it on the GPU at several sizes with fresh
// random inputs and compare every output with the CPU reference of the original (fp32) graph,
// with the tolerance of tests/README.md for the precision. Also reports launches, so a test can
// check that a pattern became the expected kernels.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "compiler/reference/reference_compare.h"
#include "tests/support/onnx_builder.h"

namespace kiln::testing {

struct GpuCheck {
  compiler::Precision precision = compiler::Precision::kF32;
  std::string size_dim = "S";
  int64_t max_size = 1024;
  std::vector<int64_t> sizes = {1, 3, 17};   // run sizes (each must be <= max_size)
  std::vector<int64_t> compile_sizes = {};   // specialised kernels
  std::vector<int64_t> capture_sizes = {};   // empty: run eagerly (mode NONE)
  compiler::Tolerance tol;                   // default: tolerance_elementwise(precision)
  bool tol_set = false;
  // Integer inputs (gather indices, ids) are uniform in [0, int_high).
  int64_t int_high = 4;
  // Debug executor: poisons padding rows (NaN for floats) so a leak into real rows shows.
  bool debug = true;
  // >= 0: compile with CompileRequest::force_candidate, so every launch with more than this many
  // candidates runs candidate `candidate` at the compile sizes (run those sizes to test it).
  int candidate = -1;
  // compilation.skinny_gemm_max_m; -1: the config's default.
  int64_t skinny_gemm_max_m = -1;
  // Compile with `autotune: on` (launch configurations and GEMM algorithms timed on this GPU).
  bool autotune = false;
};

// The tolerance helpers, so callers can say check.with_tol(...).
GpuCheck gpu_check(compiler::Precision p, std::vector<int64_t> sizes);

struct GpuCheckReport {
  int kernel_steps = 0;  // launches of generated kernels per run (all pieces)
  int gemm_steps = 0;
  int skinny_gemms = 0;    // GEMM steps with a skinny kernel at some size (CompileOutcome)
  int tuned_launches = 0;  // launches that ran a candidate (CompileOutcome::tuned_launches)
  std::string detail;    // per size: "size 17: max|err| ..., 0 of N outside tolerance"
};

// Compiles, runs and compares; a failure names the size, output and first mismatch.
::testing::AssertionResult gpu_model_matches_reference(const OnnxBuilder& model,
                                                       const GpuCheck& check, std::mt19937& rng,
                                                       GpuCheckReport* report = nullptr);

// Without a GPU: compiles `model` (fp32, sizes {1, 17} specialised, autotune off) forcing
// launch candidate `candidate` (CompileRequest::force_candidate), so NVRTC builds it into the
// artifact; `outcome` gets the compile's counts (kernel_steps, tuned_launches).
::testing::AssertionResult compiles_with_candidate(const OnnxBuilder& model, int candidate,
                                                   compiler::CompileOutcome* outcome);

// True when a CUDA device is present; else `why` says why not (tests GTEST_SKIP with it).
bool gpu_available(std::string* why);

}  // namespace kiln::testing
