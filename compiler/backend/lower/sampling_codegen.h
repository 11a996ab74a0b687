// Sampling codegen: the token-sampling kernel of kernels/sampling.cuh for one (logit dtype,
// vocabulary, maximum rows): its definition and launch geometry, so the compiler can add it to
// an artifact (compiled by NVRTC at compile time like every kiln kernel). One launch per decode
// step: a CTA per row, grid = max_rows; rows at or beyond the device count `active_rows` write
// nothing.
#pragma once

#include <cstdint>
#include <string>

#include "cache/dtype.h"
#include "compiler/backend/launch_plan.h"

namespace kiln::compiler {

struct SamplingKernel {
  DType dtype = DType::kF32;  // logits: f32, f16 or bf16
  int64_t vocab = 0;          // 1 to 2^24 tokens per row
  int64_t max_rows = 1;       // the largest batch the step runs (the grid)
  bool logprob = false;       // also write the chosen token's log-probability
};

// The definition (params below, then the module's `long long S`, which it does not read) and
// its launch: `block` threads per CTA, `grid` CTAs.
//   const T* logits, long long row_stride, const float* temperature, const int* top_k,
//   const float* top_p, const unsigned long long* seed, const unsigned long long* step,
//   const int* active_rows (nullptr: every row), int* tokens[, float* logprobs]
struct SamplingLaunch {
  KernelDef def;
  uint32_t block = 1024;
  int64_t grid = 1;
};

// Threads per CTA for a vocabulary: about 8 tokens per thread per pass, 32 to 1024.
uint32_t sampling_block(int64_t vocab);
// Whether codegen_sampling takes `k` (dtype, vocabulary and rows in range); `why` says what not.
bool sampling_supported(const SamplingKernel& k, std::string* why);
// The kernel; def.symbol is "kiln_sample_<dtype>_v<vocab>_r<rows>[_lp]__K<signature>" (the
// signature declares one row of logits as the extent of `logits`; a caller adding it to a
// module with other kernels may rename the part before "__K").
SamplingLaunch codegen_sampling(const SamplingKernel& k);

}  // namespace kiln::compiler
