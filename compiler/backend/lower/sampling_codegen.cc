#include "compiler/backend/lower/sampling_codegen.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/backend/kernel_codegen.h"

namespace kiln::compiler {

uint32_t sampling_block(int64_t vocab) {
  // About 8 tokens per thread per pass; a full block from 8k tokens up.
  const int64_t threads = (vocab / 8 + 31) / 32 * 32;
  return static_cast<uint32_t>(std::clamp<int64_t>(threads, 32, 1024));
}

bool sampling_supported(const SamplingKernel& k, std::string* why) {
  if (k.dtype != DType::kF32 && k.dtype != DType::kF16 && k.dtype != DType::kBF16) {
    *why = fmt::format("sampling takes f32, f16 or bf16 logits, not {}", dtype_name(k.dtype));
    return false;
  }
  if (k.vocab < 1 || k.vocab > (int64_t{1} << 24)) {
    *why = fmt::format("sampling takes 1 to 2^24 tokens per row, not {}", k.vocab);
    return false;
  }
  if (k.max_rows < 1 || k.max_rows > 65535) {
    *why = fmt::format("sampling takes 1 to 65535 rows, not {}", k.max_rows);
    return false;
  }
  return true;
}

SamplingLaunch codegen_sampling(const SamplingKernel& k) {
  SamplingLaunch out;
  out.block = sampling_block(k.vocab);
  out.grid = k.max_rows;
  const std::string t(kernel_ctype(k.dtype));
  KernelDef& def = out.def;
  def.symbol = fmt::format("kiln_sample_{}_v{}_r{}{}", dtype_name(k.dtype), k.vocab, k.max_rows,
                           k.logprob ? "_lp" : "");
  def.params = {fmt::format("const {}* __restrict__ logits", t),
                "long long row_stride",
                "const float* __restrict__ temperature",
                "const int* __restrict__ top_k",
                "const float* __restrict__ top_p",
                "const unsigned long long* __restrict__ seed",
                "const unsigned long long* __restrict__ step",
                "const int* __restrict__ active_rows",
                "int* __restrict__ tokens"};
  if (k.logprob) def.params.push_back("float* __restrict__ logprobs");
  def.body = fmt::format(
      "  kiln::sample_rows<{}, {}, {}, {}>(logits, row_stride, temperature, top_k, top_p, seed, "
      "step, active_rows, tokens, {}, {}LL);\n",
      t, k.vocab, out.block, k.logprob, k.logprob ? "logprobs" : "nullptr", k.max_rows);
  def.max_threads = out.block;
  // The signature (cache/kernel_signature.h): a row of logits is the least the kernel reads.
  if (auto sig = kernel_param_signature(def); sig.ok()) {
    sig->params[0].extent =
        cache::ParamExtent{0, k.vocab * static_cast<int64_t>(dtype_size(k.dtype))};
    def.symbol = cache::kernel_symbol_with_signature(def.symbol, *sig);
  }
  return out;
}

}  // namespace kiln::compiler
