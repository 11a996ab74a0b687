// Size gating of launch-program steps: a skinny GEMM kernel step runs only at its run_sizes, and
// the GEMM step after it skips cuBLASLt at those same sizes (manifest.proto: KernelStep.gated,
// GemmStep.skinny_sizes). Both lists are validated ascending (manifest_validate_program.cc). A
// kernel step marked after_cublaslt (a gated GEMM's epilogue) runs where the GEMM before it
// runs on cuBLASLt; one marked before_cublaslt (a norm the skinny kernel applies itself) runs
// where the GEMM after it, next or past its skinny kernel, runs on cuBLASLt.
#pragma once

#include <algorithm>
#include <cstdint>

#include "schemas/manifest.pb.h"

namespace kiln::runtime {

using StepList = google::protobuf::RepeatedPtrField<schema::Step>;

// Whether GEMM step `g` is computed by the skinny kernel before it (not cuBLASLt) at size p.
inline bool gemm_step_is_skinny_at(const schema::GemmStep& g, int64_t p) {
  return std::binary_search(g.skinny_sizes().begin(), g.skinny_sizes().end(),
                            static_cast<uint64_t>(p), [](uint64_t a, uint64_t b) { return a < b; });
}

// The GEMM step that a before_cublaslt step at index i serves: the next step, or the one after
// it when the next is a gated kernel step; nullptr when there is none (validation rejects that).
inline const schema::GemmStep* gemm_step_after(const StepList& steps, int i) {
  int j = i + 1;
  if (j < steps.size() && steps.Get(j).has_kernel() && steps.Get(j).kernel().gated()) ++j;
  return j < steps.size() && steps.Get(j).has_gemm() ? &steps.Get(j).gemm() : nullptr;
}

// Whether kernel step i of a piece's `steps` launches at padded size p.
inline bool kernel_step_runs_at(const StepList& steps, int i, int64_t p) {
  const schema::KernelStep& k = steps.Get(i).kernel();
  if (k.after_cublaslt())
    return i == 0 || !steps.Get(i - 1).has_gemm() ||
           !gemm_step_is_skinny_at(steps.Get(i - 1).gemm(), p);
  if (k.before_cublaslt()) {
    const schema::GemmStep* g = gemm_step_after(steps, i);
    return g == nullptr || !gemm_step_is_skinny_at(*g, p);
  }
  return !k.gated() ||
         std::binary_search(k.run_sizes().begin(), k.run_sizes().end(), static_cast<uint64_t>(p),
                            [](uint64_t a, uint64_t b) { return a < b; });
}

}  // namespace kiln::runtime
