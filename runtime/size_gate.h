// Size gating of launch-program steps: a skinny GEMM kernel step runs only at its run_sizes, and
// the GEMM step after it skips cuBLASLt at those same sizes (manifest.proto: KernelStep.gated,
// GemmStep.skinny_sizes). Both lists are validated ascending (manifest_validate_program.cc).
#pragma once

#include <algorithm>
#include <cstdint>

#include "schemas/manifest.pb.h"

namespace kiln::runtime {

// Whether kernel step `k` launches at padded size p.
inline bool kernel_step_runs_at(const schema::KernelStep& k, int64_t p) {
  return !k.gated() ||
         std::binary_search(k.run_sizes().begin(), k.run_sizes().end(), static_cast<uint64_t>(p),
                            [](uint64_t a, uint64_t b) { return a < b; });
}

// Whether GEMM step `g` is computed by the skinny kernel before it (not cuBLASLt) at size p.
inline bool gemm_step_is_skinny_at(const schema::GemmStep& g, int64_t p) {
  return std::binary_search(g.skinny_sizes().begin(), g.skinny_sizes().end(),
                            static_cast<uint64_t>(p), [](uint64_t a, uint64_t b) { return a < b; });
}

}  // namespace kiln::runtime
