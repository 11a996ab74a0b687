// kiln::Generator: LLM generation over a model compiled with `kv_cache:` (its manifest has a
// generation section). It owns an executor, the paged KV cache (runtime/README.md,
// "Generation") and the sampling buffers. Sequences are added, prefilled with their prompt
// (in chunks of at most max_size tokens), stepped together in ragged decode batches (each
// sequence its own length), and freed; tokens are chosen on the GPU.
//
// Graph modes (GeneratorOptions::mode; default: the artifact's configured mode):
//   NONE               every step runs eagerly
//   PIECEWISE          every step replays the non-attention pieces; attention eager
//   FULL               every step replays one FULL graph per captured size
//   FULL_DECODE_ONLY   decode steps replay FULL graphs; prefill runs eagerly
//   FULL_AND_PIECEWISE decode steps replay FULL graphs; prefill PIECEWISE graphs
// Decode steps pad their batch up to the smallest captured size (padding rows write nothing
// into the cache); prefill chunks pad their token count likewise.
//
// Thread safety: one Generator is used by one thread at a time (calls are serialised by a lock).
// The destructor waits for the calls other threads are running on it; a call that starts while
// it runs returns failed_precondition.
// Device faults: after a kernel faults (the CUDA context is lost for the whole process),
// create(), prefill(), decode(), generate() and time_decode_step() return
// StatusCode::kContextLost naming the first CUDA error, without calling CUDA; restart the process
// (runtime/README.md, "Device faults").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/status.h"
#include "kiln/export.h"
#include "kiln/graph_mode.h"
#include "kiln/model.h"

namespace kiln {

using SequenceId = int64_t;

// Per-sequence sampling. temperature <= 0 (or top_k == 1): greedy. top_k <= 0: off.
// top_p >= 1: off. The same seed gives the same tokens (on any batch or launch shape).
struct SamplingParams {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;
};

struct SequenceOptions {
  SamplingParams sampling;
  int64_t max_new_tokens = 16;       // generation stops after this many tokens
  std::vector<int64_t> stop_tokens;  // generation stops after emitting one of these
};

struct GeneratorOptions {
  std::optional<CudaGraphMode> mode;  // default: the artifact's configured mode
  // Override the artifact's KV-cache size: a number of blocks, or a fraction of the device's
  // free memory (exactly one of the two when set; 0 / 0.0: the artifact's choice).
  int64_t max_blocks = 0;
  double memory_fraction = 0.0;
  // Also return each step's logits (the row of each sequence's last token) to the host.
  bool return_logits = false;
  // ExecutorOptions::capture_progress, for the generator's executor.
  std::function<void(int64_t size, size_t done, size_t total)> capture_progress = nullptr;
};

// One sequence's result of a step.
struct StepToken {
  SequenceId seq = 0;
  int64_t token = 0;
  bool finished = false;      // a stop token or max_new_tokens was reached by this token
  std::vector<float> logits;  // return_logits only: vocab floats of the last position
};

struct GeneratorStats {
  int64_t prefill_steps = 0;  // executed prefill chunks
  int64_t decode_steps = 0;
  int64_t graph_replays = 0;  // steps that replayed (FULL or PIECEWISE) graphs
  int64_t eager_steps = 0;
  double last_step_ms = -1;  // device time of the last step (events), model + sampling
};

struct KvCacheInfo {
  int64_t num_blocks = 0;
  int64_t free_blocks = 0;
  int64_t block_size = 0;
  int64_t max_sequences = 0;
  int64_t max_seq_len = 0;
  int64_t live_sequences = 0;
  int64_t bytes = 0;  // device memory of the cache tensors
};

// The result of generate(): per prompt, its new tokens, and the timing of the run.
struct GenerationResult {
  std::vector<std::vector<int64_t>> tokens;  // per prompt, in order
  double time_to_first_token_ms = 0;         // wall clock: start to every prompt prefilled
  double time_per_output_token_ms = 0;       // wall clock per decode step (median)
  double tokens_per_second = 0;              // generated tokens / total wall time
  int64_t decode_steps = 0;
};

class Generator {
 public:
  // invalid_argument when the model was not compiled for generation (no `kv_cache:`).
  KILN_API static Result<std::unique_ptr<Generator>> create(std::shared_ptr<const Model> model,
                                                            GeneratorOptions options = {});
  KILN_API ~Generator();

  // A new empty sequence. invalid_argument if `seq` is live or options are bad;
  // resource_exhausted when max_sequences are live.
  KILN_API Status add(SequenceId seq, const SequenceOptions& options = {});
  // Feeds the prompt (>= 1 tokens, appended to what the sequence holds) and samples the first
  // new token from the last position. Long prompts run in chunks of at most max_size tokens.
  // invalid_argument past max_seq_len, resource_exhausted when the cache has too few free
  // blocks; on such an error nothing changed (the sequence keeps its state).
  KILN_API Result<StepToken> prefill(SequenceId seq, std::span<const int64_t> prompt);
  // One decode step for every listed sequence (each once; each must have been prefilled and not
  // finished): feeds each sequence's last sampled token and samples the next. All-or-nothing on
  // cache errors, as prefill. Returns one StepToken per sequence, in order.
  KILN_API Result<std::vector<StepToken>> decode(std::span<const SequenceId> seqs);
  // Ends a sequence: its blocks return to the cache. not_found for an unknown sequence.
  KILN_API Status free(SequenceId seq);

  // Convenience: adds one sequence per prompt (ids from 0 up, unused ones), prefills each,
  // decodes them as one ragged batch until each finishes, frees them.
  KILN_API Result<GenerationResult> generate(const std::vector<std::vector<int64_t>>& prompts,
                                             const SequenceOptions& options);

  // Tokens sampled so far for `seq` (not its prompt).
  KILN_API Result<std::vector<int64_t>> output_tokens(SequenceId seq) const;
  KILN_API KvCacheInfo kv_cache_info() const;
  KILN_API GeneratorStats stats() const;
  KILN_API CudaGraphMode mode() const;  // after any downgrade
  KILN_API const std::string& downgrade_reason() const;
  KILN_API int64_t vocab_size() const;
  // Decode-step device time (events, median of `iters`) at `batch` sequences each holding
  // `context` tokens — for benchmarks. Adds, prefills and frees its own sequences; needs
  // `batch` free sequence slots and the blocks for them.
  KILN_API Result<double> time_decode_step(int64_t batch, int64_t context, int iters);

 private:
  struct State;
  explicit Generator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace kiln
