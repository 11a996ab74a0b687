// Size gating of launch-program steps: a skinny GEMM kernel step runs only at its run_sizes, and
// the GEMM step after it skips cuBLASLt at those same sizes (manifest.proto: KernelStep.gated,
// GemmStep.skinny_sizes). Both lists are validated ascending (manifest_validate_program.cc). A
// kernel step marked after_cublaslt (a gated GEMM's epilogue) runs where the GEMM before it
// runs on cuBLASLt; one marked before_cublaslt (a norm the skinny kernel applies itself) runs
// where the GEMM after it, next or past its skinny kernel, runs on cuBLASLt. Route gating: at its
// route_sizes a skip_on_decode step does not run on the decode route and a decode_only step
// runs only there (KernelStep.skip_on_decode / decode_only / route_sizes).
#pragma once

#include <algorithm>
#include <cstdint>

#include "schemas/manifest.pb.h"

namespace kiln::runtime {

using StepList = google::protobuf::RepeatedPtrField<schema::Step>;

// Whether the ascending size list `sizes` (run_sizes, skinny_sizes, route_sizes) holds p.
template <typename List>
bool size_listed(const List& sizes, int64_t p) {
  return std::binary_search(sizes.begin(), sizes.end(), static_cast<uint64_t>(p),
                            [](uint64_t a, uint64_t b) { return a < b; });
}

// Whether GEMM step `g` is computed by the skinny kernel before it (not cuBLASLt) at size p.
inline bool gemm_step_is_skinny_at(const schema::GemmStep& g, int64_t p) {
  return size_listed(g.skinny_sizes(), p);
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
  return !k.gated() || size_listed(k.run_sizes(), p);
}

// Whether kernel step `k` runs on the decode route (decode_route) or the other one at padded
// size p, as far as route gating goes.
inline bool kernel_step_on_route(const schema::KernelStep& k, bool decode_route, int64_t p) {
  if (!k.skip_on_decode() && !k.decode_only()) return true;
  const bool gated = size_listed(k.route_sizes(), p);
  return k.decode_only() ? decode_route && gated : !(decode_route && gated);
}

}  // namespace kiln::runtime
