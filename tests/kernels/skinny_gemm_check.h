// What the skinny GEMM GPU tests share (skinny_gemm_gpu_test, skinny_gemm_candidates_gpu_test):
// the check of a GEMM model with small planned sizes, so that the skinny kernel runs at M <= 16
// and cuBLASLt above (sizes 1 and 4 specialised; 2, 8, 16 on the general kernel; 3 padded to
// 4; 17 and 32 on cuBLASLt).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "tests/support/gemm_models.h"
#include "tests/support/gpu_model_check.h"

namespace kiln::testing {

inline GpuCheck skinny_check(compiler::Precision p, int64_t k) {
  GpuCheck c = gemm_check(p, k);
  c.compile_sizes = {1, 4};
  c.capture_sizes = {1, 2, 4, 8, 16, 32};
  c.sizes = {1, 2, 3, 4, 8, 16, 17, 32};
  c.skinny_gemm_max_m = 16;  // the kernel at every M it takes
  return c;
}

// A norm model's check: the tolerance allows for the rounding of the normalised rows.
inline GpuCheck norm_check(compiler::Precision p, int64_t k, bool gated, int max_m) {
  GpuCheck c = skinny_check(p, k);
  c.tol = norm_gemm_tolerance(p, k, gated);
  c.skinny_gemm_max_m = max_m;
  return c;
}

struct KN {
  int64_t k, n;
};

// `model` matches the CPU reference at every size of `check`, with one GEMM step that has a
// skinny kernel.
inline void expect_skinny_matches(const OnnxBuilder& model, const GpuCheck& check, int64_t k,
                                  std::mt19937& rng) {
  SCOPED_TRACE(std::string(compiler::precision_name(check.precision)) + " K=" + std::to_string(k));
  GpuCheckReport report;
  EXPECT_TRUE(gpu_model_matches_reference(model, check, rng, &report)) << report.detail;
  EXPECT_EQ(report.gemm_steps, 1);
  EXPECT_EQ(report.skinny_gemms, 1) << "the GEMM got no skinny kernel";
}

}  // namespace kiln::testing
