// Generator::State::step: one generation step through the executor's launch program, and the
// generator's device set-up (init).
//
// A step is a flat list of T tokens (any sequences, each sequence's tokens consecutive): the
// program runs at the padded token count P (the smallest captured size >= T on the step's
// route), so input rows T..P-1 are padding: token 0 at position 0, slot -1 (writes nothing into
// the cache) and context length 0 (reads nothing). Order on the executor's stream: input
// copies, KV images, the program (graph replay or eager), sampling, the token copy back; one
// synchronisation at the end.
#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/cuda_check.h"
#include "runtime/generator_state.h"
#include "runtime/size_table.h"

namespace kiln {
namespace {

constexpr int64_t kAlign = 256;
int64_t align_up(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Offsets of the sampling block's arrays for `rows` rows.
struct SamplingLayout {
  int64_t temperature = 0, top_k = 0, top_p = 0, seed = 0, step = 0, tokens = 0, active = 0,
          bytes = 0;
  explicit SamplingLayout(int64_t rows) {
    temperature = 0;
    top_k = align_up(temperature + 4 * rows);
    top_p = align_up(top_k + 4 * rows);
    seed = align_up(top_p + 4 * rows);
    step = align_up(seed + 8 * rows);
    active = align_up(step + 8 * rows);
    tokens = align_up(active + 4);
    bytes = align_up(tokens + 4 * rows);
  }
};

// Writes `v` as element i of a buffer of dtype t (an integer input: i64 or i32).
void put_int(char* base, DType t, int64_t i, int64_t v) {
  if (t == DType::kI32) {
    const auto x = static_cast<int32_t>(v);
    std::memcpy(base + 4 * i, &x, 4);
  } else {
    std::memcpy(base + 8 * i, &v, 8);
  }
}

float to_float(DType t, const char* p) {
  if (t == DType::kF32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(t == DType::kBF16 ? bf16_bits_to_double(h) : f16_bits_to_double(h));
}

}  // namespace

Generator::State::~State() {
  if (es == nullptr) return;
  runtime::DeviceGuard guard(es->ms->device);
  if (es->stream != nullptr) (void)cudaStreamSynchronize(es->stream);
  if (start != nullptr) (void)cudaEventDestroy(start);
  if (stop != nullptr) (void)cudaEventDestroy(stop);
  if (d_sampling != nullptr) (void)cudaFree(d_sampling);
  for (void* p : {static_cast<void*>(h_sampling), static_cast<void*>(h_logits)})
    if (p != nullptr) (void)cudaFreeHost(p);
  (void)cudaGetLastError();
}

Status Generator::State::init() {
  const schema::Manifest& m = ms().manifest;
  gen = &m.generation();
  const auto find = [](const std::vector<TensorInfo>& list, const std::string& name) {
    for (size_t i = 0; i < list.size(); ++i)
      if (list[i].name == name) return static_cast<int>(i);
    return -1;
  };
  input_ids = find(ms().inputs, gen->input_ids());
  position_ids = find(ms().inputs, gen->position_ids());
  attention_mask = gen->attention_mask().empty() ? -1 : find(ms().inputs, gen->attention_mask());
  logits = find(ms().outputs, gen->logits());
  if (input_ids < 0 || position_ids < 0 || logits < 0 ||
      (!gen->attention_mask().empty() && attention_mask < 0))
    return internal_error("the generation section names inputs/outputs the model lacks");
  vocab = gen->vocab();
  max_rows = gen->sampling().grid();
  runtime::DeviceGuard guard(es->ms->device);
  KILN_RETURN_IF_ERROR(guard.status());
  void* p = nullptr;
  const SamplingLayout lay(max_rows);
  KILN_CUDA_TRY(cudaMalloc(&p, static_cast<size_t>(lay.bytes)), "cudaMalloc of the sampling state");
  d_sampling = static_cast<char*>(p);
  KILN_CUDA_TRY(cudaMallocHost(&p, static_cast<size_t>(lay.bytes)),
                "cudaMallocHost of the sampling state");
  h_sampling = static_cast<char*>(p);
  if (options.return_logits) {
    KILN_CUDA_TRY(cudaMallocHost(&p, static_cast<size_t>(4 * max_rows * vocab)),
                  "cudaMallocHost of the returned logits");
    h_logits = static_cast<float*>(p);
  }
  KILN_CUDA_TRY(cudaEventCreate(&start), "cudaEventCreate");
  KILN_CUDA_TRY(cudaEventCreate(&stop), "cudaEventCreate");
  return Status::ok_status();
}

Status Generator::State::check_room(SequenceId seq, int64_t tokens) const {
  const runtime::KvBlockManager& mgr = es->kv->manager();
  KILN_ASSIGN_OR_RETURN(const int64_t length, mgr.length(seq));
  const int64_t limit = mgr.geometry().max_seq_len;
  if (length + tokens > limit)
    return invalid_argument("sequence " + std::to_string(seq) + " holds " + std::to_string(length) +
                            " tokens; " + std::to_string(tokens) + " more exceed max_seq_len " +
                            std::to_string(limit));
  const int64_t need = mgr.blocks_for(length + tokens) - mgr.blocks_for(length);
  if (need > mgr.free_blocks())
    return resource_exhausted("the KV cache is full: sequence " + std::to_string(seq) + " needs " +
                              std::to_string(need) + " more blocks, " +
                              std::to_string(mgr.free_blocks()) + " of " +
                              std::to_string(mgr.geometry().num_blocks) +
                              " are free (free finished sequences, or raise max_blocks / "
                              "memory_fraction)");
  return Status::ok_status();
}

void Generator::State::record(SequenceId seq, StepToken& t) {
  Sequence& s = seqs.at(seq);
  s.output.push_back(t.token);
  s.last = t.token;
  const auto& stops = s.options.stop_tokens;
  s.finished = static_cast<int64_t>(s.output.size()) >= s.options.max_new_tokens ||
               std::find(stops.begin(), stops.end(), t.token) != stops.end();
  t.finished = s.finished;
}

Status Generator::State::write_inputs(std::span<const runtime::SeqTokens> rows,
                                      std::span<const int64_t> ids, int64_t p, bool copy) {
  auto* h_ids = static_cast<char*>(es->host_inputs[input_ids]);
  auto* h_pos = static_cast<char*>(es->host_inputs[position_ids]);
  auto* h_mask =
      attention_mask >= 0 ? static_cast<char*>(es->host_inputs[attention_mask]) : nullptr;
  const DType ids_t = ms().inputs[input_ids].dtype;
  const DType pos_t = ms().inputs[position_ids].dtype;
  int64_t t = 0;
  for (const runtime::SeqTokens& r : rows) {
    KILN_ASSIGN_OR_RETURN(const int64_t length, manager().length(r.seq));  // after reserve
    for (int64_t i = 0; i < r.new_tokens; ++i, ++t) {
      put_int(h_ids, ids_t, t, ids[static_cast<size_t>(t)]);
      put_int(h_pos, pos_t, t, length - r.new_tokens + i);
    }
  }
  for (; t < p; ++t) {
    put_int(h_ids, ids_t, t, 0);
    put_int(h_pos, pos_t, t, 0);
  }
  const auto copy_in = [&](int input, const char* src) -> Status {
    if (!copy) return Status::ok_status();  // the decode graph copies the images itself
    const DType dt = ms().inputs[input].dtype;
    KILN_CUDA_TRY(cudaMemcpyAsync(es->inputs[input], src, static_cast<size_t>(p) * dtype_size(dt),
                                  cudaMemcpyHostToDevice, es->stream),
                  "copying input '" + ms().inputs[input].name + "' to the device");
    return Status::ok_status();
  };
  KILN_RETURN_IF_ERROR(copy_in(input_ids, h_ids));
  KILN_RETURN_IF_ERROR(copy_in(position_ids, h_pos));
  if (attention_mask >= 0) {
    // Ones: the mask's only reader was the attention the compiler replaced; a model that still
    // reads it sees every position as real.
    const DType mt = ms().inputs[attention_mask].dtype;
    const size_t width = dtype_size(mt);
    for (int64_t i = 0; i < p; ++i) {
      if (mt == DType::kF32) {
        const float one = 1.0f;
        std::memcpy(h_mask + 4 * i, &one, 4);
      } else if (mt == DType::kBool || mt == DType::kU8 || mt == DType::kI8) {
        h_mask[i] = 1;
      } else {
        put_int(h_mask, width == 4 ? DType::kI32 : DType::kI64, i, 1);
      }
    }
    KILN_RETURN_IF_ERROR(copy_in(attention_mask, h_mask));
  }
  return Status::ok_status();
}

Status Generator::State::launch_sampling(std::span<const runtime::SeqTokens> rows,
                                         int64_t first_row) {
  const auto n = static_cast<int64_t>(rows.size());
  const SamplingLayout lay(max_rows);
  auto* temperature = reinterpret_cast<float*>(h_sampling + lay.temperature);
  auto* top_k = reinterpret_cast<int32_t*>(h_sampling + lay.top_k);
  auto* top_p = reinterpret_cast<float*>(h_sampling + lay.top_p);
  auto* seed = reinterpret_cast<uint64_t*>(h_sampling + lay.seed);
  auto* stepn = reinterpret_cast<uint64_t*>(h_sampling + lay.step);
  auto* active = reinterpret_cast<int32_t*>(h_sampling + lay.active);
  for (int64_t r = 0; r < n; ++r) {
    const Sequence& s = seqs.at(rows[static_cast<size_t>(r)].seq);
    temperature[r] = s.options.sampling.temperature;
    top_k[r] = s.options.sampling.top_k;
    top_p[r] = s.options.sampling.top_p;
    seed[r] = s.options.sampling.seed;
    stepn[r] = s.output.size();
  }
  *active = static_cast<int32_t>(n);
  // Everything before the tokens: the parameters and active_rows, one copy.
  KILN_CUDA_TRY(cudaMemcpyAsync(d_sampling, h_sampling, static_cast<size_t>(lay.tokens),
                                cudaMemcpyHostToDevice, es->stream),
                "copying the sampling parameters");
  const DType lt = ms().outputs[logits].dtype;
  const char* logits_ptr = static_cast<const char*>(es->outputs[logits]) +
                           first_row * vocab * static_cast<int64_t>(dtype_size(lt));
  long long row_stride = vocab;
  const float* a_temp = reinterpret_cast<const float*>(d_sampling + lay.temperature);
  const int32_t* a_topk = reinterpret_cast<const int32_t*>(d_sampling + lay.top_k);
  const float* a_topp = reinterpret_cast<const float*>(d_sampling + lay.top_p);
  const uint64_t* a_seed = reinterpret_cast<const uint64_t*>(d_sampling + lay.seed);
  const uint64_t* a_step = reinterpret_cast<const uint64_t*>(d_sampling + lay.step);
  const int32_t* a_active = reinterpret_cast<const int32_t*>(d_sampling + lay.active);
  int32_t* a_tokens = reinterpret_cast<int32_t*>(d_sampling + lay.tokens);
  long long s_unused = n;
  void* args[] = {&logits_ptr, &row_stride, &a_temp,   &a_topk,   &a_topp,
                  &a_seed,     &a_step,     &a_active, &a_tokens, &s_unused};
  const schema::SamplingKernel& k = gen->sampling();
  const void* fn = reinterpret_cast<const void*>(ms().kernels[k.kernel()]);
  cudaError_t err = cudaLaunchKernel(fn, dim3(k.grid()), dim3(k.block()), args, 0, es->stream);
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess)
    return runtime::cuda_status(
        err, "launching the sampling kernel '" +
                 ms().manifest.kernels(static_cast<int>(k.kernel())).symbol() + "'");
  KILN_CUDA_TRY(cudaMemcpyAsync(h_sampling + lay.tokens, d_sampling + lay.tokens,
                                static_cast<size_t>(4 * n), cudaMemcpyDeviceToHost, es->stream),
                "copying the sampled tokens back");
  if (h_logits != nullptr) {
    const size_t elt = dtype_size(lt);
    KILN_CUDA_TRY(cudaMemcpyAsync(h_logits, logits_ptr, static_cast<size_t>(n * vocab) * elt,
                                  cudaMemcpyDeviceToHost, es->stream),
                  "copying the logits back");
  }
  return Status::ok_status();
}

Result<std::vector<StepToken>> Generator::State::step(std::span<const runtime::SeqTokens> rows,
                                                      std::span<const int64_t> ids, bool decode,
                                                      bool sample) {
  const auto t = static_cast<int64_t>(ids.size());
  const int64_t max_size = es->model->max_size();
  if (t < 1 || t > max_size)
    return invalid_argument("a step of " + std::to_string(t) + " tokens is outside [1, max_size " +
                            std::to_string(max_size) + "]");
  if (sample && static_cast<int64_t>(rows.size()) > max_rows)
    return invalid_argument("a step samples " + std::to_string(rows.size()) +
                            " sequences; the artifact samples at most " + std::to_string(max_rows));
  int64_t first_row = 0;  // the logits row of the first sampled token
  if (sample && rows.size() == 1) {
    first_row = t - 1;
  } else if (sample) {
    for (const runtime::SeqTokens& r : rows)
      if (r.new_tokens != 1)
        return internal_error("a step samples several sequences only when each adds one token");
  }
  KILN_RETURN_IF_ERROR(manager().reserve(rows));
  const bool decode_route = decode && !es->decode_captured.empty();
  KILN_ASSIGN_OR_RETURN(
      const runtime::SizeChoice choice,
      runtime::size_choose(decode_route ? es->decode_captured : es->captured, max_size, t));
  const int64_t p = choice.padded;
  runtime::DeviceGuard guard(es->ms->device);
  KILN_RETURN_IF_ERROR(guard.status());
  Status done = [&]() -> Status {
    KILN_ASSIGN_OR_RETURN(const runtime::GemmPlanSet* set, es->plans_for(p));
    // A decode graph that copies the input and KV images itself takes them as filled here
    // (safe to refill: every step ends by synchronising the stream, so no replay still reads
    // them; the KV images also wait on images_read).
    const auto graph = decode_route ? es->decode_graphs.find(p) : es->decode_graphs.end();
    const bool graph_copies = graph != es->decode_graphs.end() && graph->second->copies_from_host();
    KILN_CUDA_TRY(cudaEventRecord(start, es->stream), "cudaEventRecord");
    KILN_RETURN_IF_ERROR(write_inputs(rows, ids, p, !graph_copies));
    KILN_RETURN_IF_ERROR(es->kv->write_tokens(rows, p, es->stream, !graph_copies));
    KILN_RETURN_IF_ERROR(decode ? es->execute_decode(t, p, *set) : es->execute(t, p, *set));
    if (graph_copies) KILN_RETURN_IF_ERROR(es->kv->images_read(es->stream));
    if (sample) KILN_RETURN_IF_ERROR(launch_sampling(rows, first_row));
    KILN_CUDA_TRY(cudaEventRecord(stop, es->stream), "cudaEventRecord");
    KILN_CUDA_TRY(cudaStreamSynchronize(es->stream), "cudaStreamSynchronize");
    return Status::ok_status();
  }();
  if (!done.ok()) {
    (void)cudaStreamSynchronize(es->stream);
    (void)cudaGetLastError();
    return done.with_context(std::string(decode ? "decode" : "prefill") + " step of " +
                             std::to_string(t) + " tokens (padded to " + std::to_string(p) + ")");
  }
  float ms_elapsed = 0;
  KILN_CUDA_TRY(cudaEventElapsedTime(&ms_elapsed, start, stop), "cudaEventElapsedTime");
  stats.last_step_ms = ms_elapsed;
  ++(decode ? stats.decode_steps : stats.prefill_steps);
  const bool replayed =
      decode_route ? es->decode_graphs.count(p) || es->graphs.count(p) : es->graphs.count(p) > 0;
  ++(replayed ? stats.graph_replays : stats.eager_steps);
  std::vector<StepToken> out;
  if (!sample) return out;
  const SamplingLayout lay(max_rows);
  const auto* tokens = reinterpret_cast<const int32_t*>(h_sampling + lay.tokens);
  const DType lt = ms().outputs[logits].dtype;
  for (size_t r = 0; r < rows.size(); ++r) {
    StepToken st;
    st.seq = rows[r].seq;
    st.token = tokens[r];
    if (h_logits != nullptr) {
      st.logits.resize(static_cast<size_t>(vocab));
      const char* row = reinterpret_cast<const char*>(h_logits) +
                        static_cast<int64_t>(r) * vocab * static_cast<int64_t>(dtype_size(lt));
      for (int64_t v = 0; v < vocab; ++v)
        st.logits[static_cast<size_t>(v)] = to_float(lt, row + v * dtype_size(lt));
    }
    record(st.seq, st);
    out.push_back(std::move(st));
  }
  return out;
}

}  // namespace kiln
