// Generator::State: what one generator owns beyond its executor (which owns the stream, arena,
// graphs, the KV cache and the pinned images of the step inputs): the generation section's
// bindings, pinned staging for the sampling parameters, and each live sequence's bookkeeping.
// generator.cc holds the public methods, generator_step.cc the step engine (inputs → KV images →
// replay or eager launches → GPU sampling → tokens).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/executor.h"
#include "kiln/generator.h"
#include "runtime/call_gate.h"
#include "runtime/executor_state.h"

namespace kiln {

struct Generator::State {
  struct Sequence {
    SequenceOptions options;
    std::vector<int64_t> output;  // sampled tokens
    int64_t last = -1;            // the last sampled token: the next decode step's input
    bool finished = false;
  };

  std::unique_ptr<Executor> executor;
  Executor::State* es = nullptr;            // executor->state_
  const schema::Generation* gen = nullptr;  // manifest.generation
  GeneratorOptions options;
  int input_ids = -1, position_ids = -1, attention_mask = -1;  // model input indices
  int logits = -1;                                             // model output index
  int64_t vocab = 0;
  int64_t max_rows = 0;  // rows one sampling launch takes (its grid)

  // Sampling parameters and results, in one device and one pinned block of the same layout:
  // temperature f32, top_k i32, top_p f32, seed u64, step u64 (max_rows each), active_rows i32,
  // then tokens i32 (max_rows): the parameters go in one copy.
  char* d_sampling = nullptr;
  char* h_sampling = nullptr;
  float* h_logits = nullptr;  // return_logits: max_rows · vocab floats (pinned)
  cudaEvent_t start = nullptr, stop = nullptr;

  std::unordered_map<SequenceId, Sequence> seqs;
  GeneratorStats stats;
  std::mutex mu;
  // Entered by every method before mu; ~Generator closes it, so it waits for them.
  mutable runtime::CallGate gate;

  ~State();
  Status init();
  const runtime::ModelState& ms() const { return *es->ms; }
  runtime::KvBlockManager& manager() { return es->kv->manager(); }

  // One step: `rows` (each sequence once, with its new token count) and their new token ids,
  // concatenated in row order. Reserves the tokens in the KV cache (all-or-nothing: on a cache
  // error nothing changed), writes the inputs and the per-token KV images, runs the program
  // (decode route when `decode`), then samples one token per row from its last position when
  // `sample`. Returns the sampled tokens in row order (empty when not sampling).
  Result<std::vector<StepToken>> step(std::span<const runtime::SeqTokens> rows,
                                      std::span<const int64_t> ids, bool decode, bool sample);
  // Generator::add without the lock (the caller holds mu): checks the options, adds `seq`.
  Status add_sequence(SequenceId seq, const SequenceOptions& options);
  // Checks the sequence can take `tokens` more: max_seq_len and free blocks (what reserve would
  // refuse), so a chunked prefill fails before its first chunk.
  Status check_room(SequenceId seq, int64_t tokens) const;
  // Records a sampled token: output, last, finished (stop token or max_new_tokens).
  void record(SequenceId seq, StepToken& t);

 private:
  // Fills the step's input images (es->host_inputs) at padded size p and, with `copy`, copies
  // them into the executor's input buffers on its stream.
  Status write_inputs(std::span<const runtime::SeqTokens> rows, std::span<const int64_t> ids,
                      int64_t p, bool copy);
  Status launch_sampling(std::span<const runtime::SeqTokens> rows, int64_t first_row);
};

}  // namespace kiln
