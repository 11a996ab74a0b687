// runtime/size_gate.h: which kernel and GEMM steps run at a padded size.
#include "runtime/size_gate.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::runtime {
namespace {

// A piece [norm (before_cublaslt)] [skinny (gated at 1, 4)] [GEMM (skinny at 1, 4)]
// [epilogue (after_cublaslt)] [plain].
StepList piece() {
  StepList steps;
  steps.Add()->mutable_kernel()->set_before_cublaslt(true);
  schema::KernelStep* skinny = steps.Add()->mutable_kernel();
  skinny->set_gated(true);
  schema::GemmStep* gemm = steps.Add()->mutable_gemm();
  for (uint32_t s : {1u, 4u}) {
    skinny->add_run_sizes(s);
    gemm->add_skinny_sizes(s);
  }
  steps.Add()->mutable_kernel()->set_after_cublaslt(true);
  steps.Add()->mutable_kernel();
  return steps;
}

// The steps that launch at size p: kernel steps by size_gate, the GEMM where it is not skinny.
std::vector<int> launched(const StepList& steps, int64_t p) {
  std::vector<int> out;
  for (int i = 0; i < steps.size(); ++i)
    if (steps.Get(i).has_gemm() ? !gemm_step_is_skinny_at(steps.Get(i).gemm(), p)
                                : kernel_step_runs_at(steps, i, p))
      out.push_back(i);
  return out;
}

TEST(SizeGate, SkinnySizesRunOnlyTheSkinnyKernel) {
  const StepList steps = piece();
  EXPECT_EQ(launched(steps, 1), (std::vector<int>{1, 4}));
  EXPECT_EQ(launched(steps, 4), (std::vector<int>{1, 4}));
}

TEST(SizeGate, OtherSizesRunTheNormTheGemmAndItsEpilogue) {
  const StepList steps = piece();
  for (int64_t p : {2, 3, 8, 512}) EXPECT_EQ(launched(steps, p), (std::vector<int>{0, 2, 3, 4}));
}

TEST(SizeGate, BeforeCublasltRightBeforeAGemmWithoutSkinnyKernel) {
  StepList steps;
  steps.Add()->mutable_kernel()->set_before_cublaslt(true);
  steps.Add()->mutable_gemm()->add_skinny_sizes(2);  // as if its kernel step were elsewhere
  EXPECT_EQ(launched(steps, 2), (std::vector<int>{}));
  EXPECT_EQ(launched(steps, 1), (std::vector<int>{0, 1}));
  EXPECT_EQ(gemm_step_after(steps, 0), &steps.Get(1).gemm());
  EXPECT_EQ(gemm_step_after(steps, 1), nullptr);
}

}  // namespace
}  // namespace kiln::runtime
