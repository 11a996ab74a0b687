// kiln::Generator's public methods: sequences in and out, prefill in chunks, ragged decode
// steps, the generate() loop and the decode-step timer. The step engine is generator_step.cc.
#include "kiln/generator.h"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <new>
#include <string>

#include "runtime/context_lost.h"
#include "runtime/cuda_check.h"
#include "runtime/generator_state.h"
#include "runtime/median.h"
#include "runtime/status_guard.h"

namespace kiln {
namespace {

std::string seq_name(SequenceId s) { return "sequence " + std::to_string(s); }

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Generator::Generator(std::unique_ptr<State> state) : state_(std::move(state)) {}
Generator::~Generator() {
  if (state_ != nullptr) state_->gate.close();  // wait for calls running on other threads
}

Result<std::unique_ptr<Generator>> Generator::create(std::shared_ptr<const Model> model,
                                                     GeneratorOptions options) {
  return runtime::status_guard("Generator::create", [&]() -> Result<std::unique_ptr<Generator>> {
    KILN_RETURN_IF_ERROR(runtime::context_lost_check());
    if (model == nullptr) return invalid_argument("Generator::create: the model is null");
    if (!model->state().manifest.has_generation())
      return invalid_argument("model '" + model->name() +
                              "' was not compiled for generation: compile a KV-cache decoder "
                              "export with a `kv_cache:` section in its config");
    if (options.max_blocks < 0 || options.memory_fraction < 0 || options.memory_fraction > 1 ||
        (options.max_blocks > 0 && options.memory_fraction > 0))
      return invalid_argument(
          "Generator::create: set at most one of max_blocks (>= 1) and memory_fraction (in (0, "
          "1])");
    runtime::KvCacheDeviceOptions kv;
    kv.max_blocks = options.max_blocks;
    kv.memory_fraction = options.memory_fraction;
    ExecutorOptions eo;
    eo.mode = options.mode;
    eo.capture_progress = options.capture_progress;
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec,
                          Executor::create_with(std::move(model), eo, &kv));
    auto state = std::make_unique<State>();
    state->options = options;
    state->es = exec->state_.get();
    state->executor = std::move(exec);
    KILN_RETURN_IF_ERROR(state->init().with_context("creating a generator"));
    return std::unique_ptr<Generator>(new Generator(std::move(state)));
  });
}

Status Generator::add(SequenceId seq, const SequenceOptions& options) {
  runtime::CallPass pass(state_->gate, "Generator::add", "generator");
  KILN_RETURN_IF_ERROR(pass.status());
  std::lock_guard lock(state_->mu);
  return state_->add_sequence(seq, options);
}

Status Generator::State::add_sequence(SequenceId seq, const SequenceOptions& options) {
  if (options.max_new_tokens < 1)
    return invalid_argument(seq_name(seq) + ": max_new_tokens " +
                            std::to_string(options.max_new_tokens) + " must be >= 1");
  const SamplingParams& sp = options.sampling;
  if (!(sp.top_p > 0.0f) || sp.temperature != sp.temperature)
    return invalid_argument(seq_name(seq) + ": top_p must be > 0 and temperature a number");
  for (int64_t t : options.stop_tokens)
    if (t < 0 || t >= vocab)
      return invalid_argument(seq_name(seq) + ": stop token " + std::to_string(t) +
                              " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  KILN_RETURN_IF_ERROR(manager().add(seq));
  seqs[seq] = Sequence{options, {}, -1, false};
  return Status::ok_status();
}

Result<StepToken> Generator::prefill(SequenceId seq, std::span<const int64_t> prompt) {
  State& st = *state_;
  runtime::CallPass pass(st.gate, "Generator::prefill", "generator");
  KILN_RETURN_IF_ERROR(pass.device_status());
  std::lock_guard lock(st.mu);
  auto it = st.seqs.find(seq);
  if (it == st.seqs.end()) return not_found(seq_name(seq) + " is not live (add it first)");
  if (it->second.finished) return invalid_argument(seq_name(seq) + " has finished");
  if (prompt.empty()) return invalid_argument(seq_name(seq) + ": the prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= st.vocab)
      return invalid_argument(seq_name(seq) + ": prompt token " + std::to_string(i) + " (" +
                              std::to_string(prompt[i]) + ") is outside the vocabulary [0, " +
                              std::to_string(st.vocab) + ")");
  KILN_RETURN_IF_ERROR(st.check_room(seq, static_cast<int64_t>(prompt.size())));
  const int64_t chunk = st.es->model->max_size();
  for (size_t at = 0; at < prompt.size(); at += static_cast<size_t>(chunk)) {
    const auto n = std::min<int64_t>(chunk, static_cast<int64_t>(prompt.size() - at));
    const bool last = at + static_cast<size_t>(n) == prompt.size();
    const runtime::SeqTokens row{seq, n};
    KILN_ASSIGN_OR_RETURN(
        std::vector<StepToken> out,
        st.step({&row, 1}, prompt.subspan(at, static_cast<size_t>(n)), false, last));
    if (last) return std::move(out.at(0));
  }
  return internal_error("prefill: no chunk ran");
}

Result<std::vector<StepToken>> Generator::decode(std::span<const SequenceId> seqs) {
  State& st = *state_;
  runtime::CallPass pass(st.gate, "Generator::decode", "generator");
  KILN_RETURN_IF_ERROR(pass.device_status());
  std::lock_guard lock(st.mu);
  if (seqs.empty()) return std::vector<StepToken>{};
  std::vector<runtime::SeqTokens> rows;
  std::vector<int64_t> ids;
  for (SequenceId s : seqs) {
    auto it = st.seqs.find(s);
    if (it == st.seqs.end()) return not_found(seq_name(s) + " is not live");
    if (it->second.last < 0) return invalid_argument(seq_name(s) + " has not been prefilled");
    if (it->second.finished) return invalid_argument(seq_name(s) + " has finished");
    rows.push_back({s, 1});
    ids.push_back(it->second.last);
  }
  // Room for every row first (reserve is all-or-nothing too, but says less).
  for (SequenceId s : seqs) KILN_RETURN_IF_ERROR(st.check_room(s, 1));
  const int64_t batch = std::min<int64_t>(st.max_rows, st.es->model->max_size());
  if (static_cast<int64_t>(rows.size()) > batch)
    return invalid_argument("a decode step of " + std::to_string(rows.size()) +
                            " sequences exceeds the largest decode batch " + std::to_string(batch));
  return st.step(rows, ids, true, true);
}

Status Generator::free(SequenceId seq) {
  State& st = *state_;
  runtime::CallPass pass(st.gate, "Generator::free", "generator");
  KILN_RETURN_IF_ERROR(pass.status());
  std::lock_guard lock(st.mu);
  KILN_RETURN_IF_ERROR(st.manager().free(seq));
  st.seqs.erase(seq);
  return Status::ok_status();
}

Result<GenerationResult> Generator::generate(const std::vector<std::vector<int64_t>>& prompts,
                                             const SequenceOptions& options) {
  return runtime::status_guard("Generator::generate", [&]() -> Result<GenerationResult> {
    runtime::CallPass pass(state_->gate, "Generator::generate", "generator");
    KILN_RETURN_IF_ERROR(pass.device_status());
    GenerationResult r;
    if (prompts.empty()) return r;
    // Frees whatever this call added, on every path out.
    struct Cleanup {
      Generator* g;
      std::vector<SequenceId>* ids;
      ~Cleanup() {
        for (SequenceId s : *ids) (void)g->free(s);
      }
    };
    std::vector<SequenceId> added;
    Cleanup cleanup{this, &added};
    const auto t0 = std::chrono::steady_clock::now();
    r.tokens.resize(prompts.size());
    std::vector<SequenceId> running;
    std::vector<SequenceId>& ids = added;  // ids[i]: prompt i's sequence
    SequenceId next = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      {
        // The id picked and added under one lock: another thread cannot take it in between.
        std::lock_guard lock(state_->mu);
        while (state_->seqs.count(next)) ++next;
        KILN_RETURN_IF_ERROR(
            state_->add_sequence(next, options).with_context("prompt " + std::to_string(i)));
      }
      added.push_back(next++);
      KILN_ASSIGN_OR_RETURN(StepToken t, prefill(ids[i], prompts[i]));
      r.tokens[i].push_back(t.token);
      if (!t.finished) running.push_back(ids[i]);
    }
    r.time_to_first_token_ms = ms_since(t0);
    std::vector<double> step_ms;
    while (!running.empty()) {
      const auto ts = std::chrono::steady_clock::now();
      KILN_ASSIGN_OR_RETURN(std::vector<StepToken> out, decode(running));
      step_ms.push_back(ms_since(ts));
      std::vector<SequenceId> still;
      for (const StepToken& t : out) {
        const auto i = static_cast<size_t>(std::find(ids.begin(), ids.end(), t.seq) - ids.begin());
        r.tokens[i].push_back(t.token);
        if (!t.finished) still.push_back(t.seq);
      }
      running = std::move(still);
    }
    const double total = ms_since(t0);
    int64_t generated = 0;
    for (const auto& t : r.tokens) generated += static_cast<int64_t>(t.size());
    r.decode_steps = static_cast<int64_t>(step_ms.size());
    r.time_per_output_token_ms = step_ms.empty() ? 0 : runtime::median(step_ms);
    r.tokens_per_second = total > 0 ? static_cast<double>(generated) * 1000.0 / total : 0;
    return r;
  });
}

Result<std::vector<int64_t>> Generator::output_tokens(SequenceId seq) const {
  runtime::CallPass pass(state_->gate, "Generator::output_tokens", "generator");
  KILN_RETURN_IF_ERROR(pass.status());
  std::lock_guard lock(state_->mu);
  auto it = state_->seqs.find(seq);
  if (it == state_->seqs.end()) return not_found(seq_name(seq) + " is not live");
  return it->second.output;
}

KvCacheInfo Generator::kv_cache_info() const {
  runtime::CallPass pass(state_->gate, "Generator::kv_cache_info", "generator");
  if (!pass.admitted()) return {};
  std::lock_guard lock(state_->mu);
  const runtime::KvCacheDevice& kv = *state_->es->kv;
  const runtime::KvCacheGeometry& g = kv.manager().geometry();
  KvCacheInfo i;
  i.num_blocks = g.num_blocks;
  i.free_blocks = kv.manager().free_blocks();
  i.block_size = g.block_size;
  i.max_sequences = g.max_sequences;
  i.max_seq_len = g.max_seq_len;
  i.live_sequences = kv.manager().live_sequences();
  i.bytes = 2 * static_cast<int64_t>(state_->gen->num_layers()) * kv.layer_bytes();
  return i;
}

GeneratorStats Generator::stats() const {
  runtime::CallPass pass(state_->gate, "Generator::stats", "generator");
  if (!pass.admitted()) return {};
  std::lock_guard lock(state_->mu);
  return state_->stats;
}

CudaGraphMode Generator::mode() const { return state_->executor->mode(); }

const std::string& Generator::downgrade_reason() const {
  return state_->executor->capture_report().downgrade_reason;
}

int64_t Generator::vocab_size() const { return state_->vocab; }

Result<double> Generator::time_decode_step(int64_t batch, int64_t context, int iters) {
  return runtime::status_guard("Generator::time_decode_step", [&]() -> Result<double> {
    runtime::CallPass pass(state_->gate, "Generator::time_decode_step", "generator");
    KILN_RETURN_IF_ERROR(pass.device_status());
    if (batch < 1 || context < 1 || iters < 1)
      return invalid_argument("time_decode_step: batch, context and iters must be >= 1");
    std::vector<SequenceId> ids;
    SequenceId next = int64_t{1} << 40;  // out of the way of callers' ids
    struct Cleanup {
      Generator* g;
      std::vector<SequenceId>* ids;
      ~Cleanup() {
        for (SequenceId s : *ids) (void)g->free(s);
      }
    };
    Cleanup cleanup{this, &ids};
    SequenceOptions o;
    o.max_new_tokens = iters + 2;
    std::vector<int64_t> prompt(static_cast<size_t>(context));
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < context; ++i)
        prompt[static_cast<size_t>(i)] = (7 * i + 13 * b + 1) % state_->vocab;
      KILN_RETURN_IF_ERROR(add(next, o));
      ids.push_back(next++);
      KILN_ASSIGN_OR_RETURN(StepToken t, prefill(ids.back(), prompt));
      (void)t;
    }
    {
      KILN_ASSIGN_OR_RETURN(std::vector<StepToken> warm, decode(ids));  // warm-up
      (void)warm;
    }
    std::vector<double> ms;
    // The timed steps are the profiled range of a profiler started with profiling off (e.g.
    // `ncu --profile-from-start off`, tools/bench/decode_profile.py); a no-op otherwise.
    (void)cudaProfilerStart();
    for (int i = 0; i < iters; ++i) {
      Result<std::vector<StepToken>> out = decode(ids);
      if (!out.ok()) {
        (void)cudaProfilerStop();
        return out.status();
      }
      ms.push_back(stats().last_step_ms);
    }
    (void)cudaProfilerStop();
    return runtime::median(ms);
  });
}

}  // namespace kiln
