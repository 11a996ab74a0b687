// Size gating of launch-program steps: a skinny GEMM kernel step runs only at its run_sizes, and
// the GEMM step after it skips cuBLASLt at those same sizes (manifest.proto: KernelStep.gated,
// GemmStep.skinny_sizes). Both lists are validated ascending (manifest_validate_program.cc). A
// kernel step marked after_cublaslt (a gated GEMM's epilogue) runs where the GEMM before it
// runs on cuBLASLt.
#pragma once

#include <algorithm>
#include <cstdint>

#include "schemas/manifest.pb.h"

namespace kiln::runtime {

// Whether GEMM step `g` is computed by the skinny kernel before it (not cuBLASLt) at size p.
inline bool gemm_step_is_skinny_at(const schema::GemmStep& g, int64_t p) {
  return std::binary_search(g.skinny_sizes().begin(), g.skinny_sizes().end(),
                            static_cast<uint64_t>(p), [](uint64_t a, uint64_t b) { return a < b; });
}

// Whether kernel step `k` launches at padded size p; `prev` is the step before it in its piece
// (nullptr for the first), which an after_cublaslt step follows (validated).
inline bool kernel_step_runs_at(const schema::KernelStep& k, const schema::Step* prev, int64_t p) {
  if (k.after_cublaslt())
    return prev == nullptr || !prev->has_gemm() || !gemm_step_is_skinny_at(prev->gemm(), p);
  return !k.gated() ||
         std::binary_search(k.run_sizes().begin(), k.run_sizes().end(), static_cast<uint64_t>(p),
                            [](uint64_t a, uint64_t b) { return a < b; });
}

}  // namespace kiln::runtime
