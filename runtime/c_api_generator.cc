// The C API of generation (kiln_generator_* in runtime/include/kiln/runtime.h) over
// kiln::Generator. Every argument is checked before the generator is called, so a rejected call
// changes nothing; errors become a kiln_status plus this thread's last error (c_api_support.h).
#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/generator.h"
#include "runtime/c_api_support.h"
#include "runtime/call_gate.h"

struct kiln_generator {
  std::unique_ptr<kiln::Generator> generator;
  bool return_logits = false;
  // Every call enters it before reading anything; kiln_generator_free closes it first.
  mutable kiln::runtime::CallGate gate;
};

namespace {

using kiln::Status;
using kiln::capi::guarded;
using kiln::capi::null_arg;

Status options_check(const kiln_generator_options& o, kiln::GeneratorOptions* out) {
  KILN_ASSIGN_OR_RETURN(out->mode, kiln::capi::graph_mode_arg("kiln_generator_create", o.mode));
  if (o.return_logits != 0 && o.return_logits != 1)
    return kiln::invalid_argument("kiln_generator_create: return_logits is " +
                                  std::to_string(o.return_logits) + ", expected 0 or 1");
  out->max_blocks = o.max_blocks;
  out->memory_fraction = o.memory_fraction;
  out->return_logits = o.return_logits == 1;
  return Status::ok_status();
}

// The caller's logits buffer of entry `i` of `fn`'s out array: allowed only with return_logits,
// and large enough for the vocabulary.
Status logits_check(const kiln_generator& g, const kiln_step_token& t, const char* fn, size_t i) {
  if (t.logits == nullptr) return Status::ok_status();
  const std::string label = std::string(fn) + ": out[" + std::to_string(i) + "]";
  if (!g.return_logits)
    return kiln::invalid_argument(label +
                                  ".logits is set but the generator was created without "
                                  "return_logits");
  const int64_t vocab = g.generator->vocab_size();
  if (t.logits_capacity < static_cast<size_t>(vocab))
    return kiln::invalid_argument(label + ".logits_capacity is " +
                                  std::to_string(t.logits_capacity) +
                                  " floats; the vocabulary has " + std::to_string(vocab));
  return Status::ok_status();
}

// A getter's body: checks `generator` and `out`, then writes get(generator) to *out.
template <typename T, typename F>
kiln_status query(const char* fn, const kiln_generator* generator, T* out, F&& get) noexcept {
  return guarded(fn, [&]() -> Status {
    if (generator == nullptr) return null_arg(fn, "generator");
    kiln::runtime::CallPass pass(generator->gate, fn, "generator");
    KILN_RETURN_IF_ERROR(pass.status());
    if (out == nullptr) return null_arg(fn, "out");
    *out = get(*generator->generator);
    return Status::ok_status();
  });
}

void token_fill(const kiln::StepToken& t, kiln_step_token* out) {
  out->seq = t.seq;
  out->token = t.token;
  out->finished = t.finished ? 1 : 0;
  if (out->logits != nullptr && !t.logits.empty())
    std::copy(t.logits.begin(), t.logits.end(), out->logits);
}

}  // namespace

extern "C" {

void kiln_generator_options_init(kiln_generator_options* out) {
  if (out == nullptr) return;
  *out = kiln_generator_options{};
  out->mode = KILN_GRAPH_MODE_ARTIFACT;
}

void kiln_sequence_options_init(kiln_sequence_options* out) {
  if (out == nullptr) return;
  const kiln::SequenceOptions d;
  *out = kiln_sequence_options{};
  out->temperature = d.sampling.temperature;
  out->top_k = d.sampling.top_k;
  out->top_p = d.sampling.top_p;
  out->seed = d.sampling.seed;
  out->max_new_tokens = d.max_new_tokens;
}

kiln_status kiln_generator_create(const kiln_model* model, const kiln_generator_options* options,
                                  kiln_generator** out) {
  return guarded("kiln_generator_create", [&]() -> Status {
    if (out == nullptr) return null_arg("kiln_generator_create", "out");
    *out = nullptr;
    kiln_generator_options o;
    kiln_generator_options_init(&o);
    if (options != nullptr) o = *options;
    kiln::GeneratorOptions go;
    KILN_RETURN_IF_ERROR(options_check(o, &go));
    if (model == nullptr) return null_arg("kiln_generator_create", "model");
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<kiln::Generator> g,
                          kiln::Generator::create(model->model, go));
    *out = new kiln_generator{std::move(g), go.return_logits, {}};
    return Status::ok_status();
  });
}

void kiln_generator_free(kiln_generator* generator) {
  if (generator == nullptr) return;
  generator->gate.close();  // wait for calls on other threads
  delete generator;
}

kiln_status kiln_generator_add(kiln_generator* generator, int64_t seq,
                               const kiln_sequence_options* options) {
  return guarded("kiln_generator_add", [&]() -> Status {
    if (generator == nullptr) return null_arg("kiln_generator_add", "generator");
    kiln::runtime::CallPass pass(generator->gate, "kiln_generator_add", "generator");
    KILN_RETURN_IF_ERROR(pass.status());
    kiln_sequence_options o;
    kiln_sequence_options_init(&o);
    if (options != nullptr) o = *options;
    if (o.stop_tokens == nullptr && o.n_stop_tokens > 0)
      return null_arg("kiln_generator_add", "options->stop_tokens");
    kiln::SequenceOptions so;
    so.sampling = {o.temperature, o.top_k, o.top_p, o.seed};
    so.max_new_tokens = o.max_new_tokens;
    if (o.n_stop_tokens > 0) so.stop_tokens.assign(o.stop_tokens, o.stop_tokens + o.n_stop_tokens);
    return generator->generator->add(seq, so);
  });
}

kiln_status kiln_generator_prefill(kiln_generator* generator, int64_t seq, const int64_t* prompt,
                                   size_t n, kiln_step_token* out) {
  return guarded("kiln_generator_prefill", [&]() -> Status {
    if (generator == nullptr) return null_arg("kiln_generator_prefill", "generator");
    kiln::runtime::CallPass pass(generator->gate, "kiln_generator_prefill", "generator");
    KILN_RETURN_IF_ERROR(pass.status());
    if (prompt == nullptr && n > 0) return null_arg("kiln_generator_prefill", "prompt");
    if (out == nullptr) return null_arg("kiln_generator_prefill", "out");
    KILN_RETURN_IF_ERROR(logits_check(*generator, *out, "kiln_generator_prefill", 0));
    KILN_ASSIGN_OR_RETURN(kiln::StepToken t,
                          generator->generator->prefill(seq, std::span<const int64_t>(prompt, n)));
    token_fill(t, out);
    return Status::ok_status();
  });
}

kiln_status kiln_generator_decode(kiln_generator* generator, const int64_t* seqs, size_t n,
                                  kiln_step_token* out) {
  return guarded("kiln_generator_decode", [&]() -> Status {
    if (generator == nullptr) return null_arg("kiln_generator_decode", "generator");
    kiln::runtime::CallPass pass(generator->gate, "kiln_generator_decode", "generator");
    KILN_RETURN_IF_ERROR(pass.status());
    if (seqs == nullptr && n > 0) return null_arg("kiln_generator_decode", "seqs");
    if (out == nullptr && n > 0) return null_arg("kiln_generator_decode", "out");
    for (size_t i = 0; i < n; ++i)
      KILN_RETURN_IF_ERROR(logits_check(*generator, out[i], "kiln_generator_decode", i));
    KILN_ASSIGN_OR_RETURN(std::vector<kiln::StepToken> tokens,
                          generator->generator->decode(std::span<const int64_t>(seqs, n)));
    if (tokens.size() != n)
      return kiln::internal_error("kiln_generator_decode: " + std::to_string(tokens.size()) +
                                  " tokens for " + std::to_string(n) + " sequences");
    for (size_t i = 0; i < n; ++i) token_fill(tokens[i], &out[i]);
    return Status::ok_status();
  });
}

kiln_status kiln_generator_free_sequence(kiln_generator* generator, int64_t seq) {
  return guarded("kiln_generator_free_sequence", [&]() -> Status {
    if (generator == nullptr) return null_arg("kiln_generator_free_sequence", "generator");
    kiln::runtime::CallPass pass(generator->gate, "kiln_generator_free_sequence", "generator");
    KILN_RETURN_IF_ERROR(pass.status());
    return generator->generator->free(seq);
  });
}

kiln_status kiln_generator_kv_cache_info(const kiln_generator* generator, kiln_kv_cache_info* out) {
  return query("kiln_generator_kv_cache_info", generator, out, [](const kiln::Generator& g) {
    const kiln::KvCacheInfo i = g.kv_cache_info();
    return kiln_kv_cache_info{i.num_blocks,  i.free_blocks,    i.block_size, i.max_sequences,
                              i.max_seq_len, i.live_sequences, i.bytes};
  });
}

kiln_status kiln_generator_vocab_size(const kiln_generator* generator, int64_t* out) {
  return query("kiln_generator_vocab_size", generator, out,
               [](const kiln::Generator& g) { return g.vocab_size(); });
}

kiln_status kiln_generator_mode(const kiln_generator* generator, int32_t* out) {
  return query("kiln_generator_mode", generator, out,
               [](const kiln::Generator& g) { return static_cast<int32_t>(g.mode()); });
}

kiln_status kiln_generator_downgrade_reason(const kiln_generator* generator, const char** out) {
  return query("kiln_generator_downgrade_reason", generator, out,
               [](const kiln::Generator& g) { return g.downgrade_reason().c_str(); });
}

}  // extern "C"
