/* kiln/runtime.h — the C API of libkiln_runtime: load a compiled kiln artifact, create
 * executors (each captures its CUDA graphs when created) and run them; or, for a model compiled
 * for generation (`kv_cache:`), create a generator and generate tokens (kiln_generator_*, the C
 * face of kiln::Generator in kiln/generator.h).
 *
 * Errors: every function that can fail returns a kiln_status (KILN_OK is 0). On failure
 * kiln_last_error() returns a message naming what is wrong (the tensor, file, expected vs got).
 * The message is per thread and stays valid until the next kiln_* call on that thread; a
 * successful call leaves it empty. No C++ exception ever crosses this API.
 *
 * Ownership is written on each pointer parameter: "borrowed" (read or written during the call,
 * never kept), "out" (written by the call), "caller frees with ..." (an object the caller owns).
 *
 * Threads: a kiln_model is immutable and may be used from any number of threads at once. A
 * kiln_executor may be used from any thread; concurrent kiln_executor_run calls on one executor
 * are serialised by its lock, so use one executor per thread for parallel work (executors of one
 * model share its weights). A kiln_generator likewise: its calls are serialised by its lock.
 * kiln_executor_free and kiln_generator_free wait for the calls already running on the object
 * (on other threads) to return; a call that starts while the free is under way returns
 * KILN_FAILED_PRECONDITION, and a call made after the free has returned uses freed memory.
 */
#ifndef KILN_RUNTIME_H_
#define KILN_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#include "kiln/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Mirrors kiln::StatusCode. */
typedef enum kiln_status {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT = 1,    /* the caller's input is wrong */
  KILN_NOT_FOUND = 2,           /* a file, artifact or name does not exist */
  KILN_UNIMPLEMENTED = 3,       /* valid but not supported yet */
  KILN_DATA_LOSS = 4,           /* corrupted or truncated artifact */
  KILN_FAILED_PRECONDITION = 5, /* the environment disagrees: no GPU, wrong arch, old driver */
  KILN_RESOURCE_EXHAUSTED = 6,  /* out of device or host memory */
  KILN_INTERNAL = 7,            /* a bug in kiln or a failing CUDA/cuBLASLt call */
  KILN_IO_ERROR = 8,            /* the operating system refused a file operation */
  /* The CUDA context is gone: a device fault (an illegal address, a trap, a failed launch...)
   * made it unusable. The first call to see the fault returns it, naming the CUDA call and
   * error; from then on every call that would touch the device (load, executor and generator
   * creation, runs, generation steps) returns it at once with the same message, without
   * calling CUDA. Nothing but restarting the process brings the device back. */
  KILN_CONTEXT_LOST = 9
} kiln_status;

/* Mirrors kiln::DType. */
typedef enum kiln_dtype {
  KILN_DTYPE_UNSPECIFIED = 0,
  KILN_DTYPE_F32 = 1,
  KILN_DTYPE_F16 = 2,
  KILN_DTYPE_BF16 = 3,
  KILN_DTYPE_F64 = 4,
  KILN_DTYPE_I64 = 5,
  KILN_DTYPE_I32 = 6,
  KILN_DTYPE_I8 = 7,
  KILN_DTYPE_U8 = 8,
  KILN_DTYPE_BOOL = 9
} kiln_dtype;

/* Mirrors kiln::CudaGraphMode; KILN_GRAPH_MODE_ARTIFACT: the mode the artifact was compiled
 * with. A mode the model cannot support is downgraded (see runtime/README.md). */
typedef enum kiln_graph_mode {
  KILN_GRAPH_MODE_ARTIFACT = -1,
  KILN_GRAPH_MODE_NONE = 0,
  KILN_GRAPH_MODE_PIECEWISE = 1,
  KILN_GRAPH_MODE_FULL = 2,
  KILN_GRAPH_MODE_FULL_DECODE_ONLY = 3,
  KILN_GRAPH_MODE_FULL_AND_PIECEWISE = 4
} kiln_graph_mode;

#define KILN_MAX_RANK 8

typedef struct kiln_model kiln_model;       /* a loaded artifact */
typedef struct kiln_executor kiln_executor; /* stream, arena, graphs; keeps its model alive */

/* A model input or output. Dim d at size S is coef[d] * S + offset[d]. */
typedef struct kiln_tensor_info {
  const char* name;  /* borrowed from the model: valid while the kiln_model lives */
  int32_t dtype;     /* a kiln_dtype */
  int32_t rank;      /* <= KILN_MAX_RANK */
  int32_t size_axis; /* the axis that grows with S, or -1 */
  int64_t coef[KILN_MAX_RANK];
  int64_t offset[KILN_MAX_RANK];
} kiln_tensor_info;

/* A tensor in caller memory, row-major and contiguous.
 * As an input: every field is set by the caller; `data` is only read.
 * As an output: the caller sets name, data, bytes (the capacity at data) and on_device;
 * kiln_executor_run sets dtype, rank and shape, and writes rank/shape bytes of data. */
typedef struct kiln_tensor {
  const char* name; /* borrowed */
  int32_t dtype;    /* a kiln_dtype */
  int32_t rank;
  int64_t shape[KILN_MAX_RANK];
  void* data;        /* borrowed */
  size_t bytes;      /* inputs: exactly numel * dtype size; outputs: capacity */
  int32_t on_device; /* 0: host memory; 1: device memory on the model's GPU (zero host copies) */
} kiln_tensor;

/* This thread's message for the last failed call; "" after a successful one. Never NULL. */
KILN_API const char* kiln_last_error(void);
/* "OK", "INVALID_ARGUMENT", ... ("UNKNOWN" for other values; a static string). */
KILN_API const char* kiln_status_name(kiln_status status);
/* Bytes per element of a kiln_dtype; 0 for an unknown value. */
KILN_API size_t kiln_dtype_size(int32_t dtype);
/* 1 when a CUDA device is usable; 0 otherwise, and kiln_last_error() says why. */
KILN_API int kiln_device_available(void);

/* Loads the artifact in `dir` (an artifact directory or a cache root holding one artifact):
 * verifies it, uploads the weights, loads the kernels. dir: borrowed, NUL-terminated.
 * out: on KILN_OK a new model, caller frees with kiln_model_free; NULL on failure. */
KILN_API kiln_status kiln_model_load(const char* dir, kiln_model** out);
/* kiln_model_load that first requires a valid signature by one of `trusted_keys` (each the text
 * of a `kiln keygen` .pub file or its 64 hex digits; `count` of them, at least 1) over every file
 * of the artifact (cache/FORMAT.md, "Signature"). Unsigned, another signer's or a changed
 * artifact: KILN_FAILED_PRECONDITION, "artifact signature check failed ...", before any GPU work;
 * a malformed key: KILN_INVALID_ARGUMENT. */
KILN_API kiln_status kiln_model_load_trusted(const char* dir, const char* const* trusted_keys,
                                             size_t count, kiln_model** out);
/* Frees the caller's reference (executors keep the model alive). NULL is accepted. */
KILN_API void kiln_model_free(kiln_model* model);

/* model: borrowed. out: written. */
KILN_API kiln_status kiln_model_input_count(const kiln_model* model, size_t* out);
KILN_API kiln_status kiln_model_output_count(const kiln_model* model, size_t* out);
KILN_API kiln_status kiln_model_max_size(const kiln_model* model, int64_t* out);
/* model: borrowed. out: written; out->name is borrowed from the model. */
KILN_API kiln_status kiln_model_input_info(const kiln_model* model, size_t index,
                                           kiln_tensor_info* out);
KILN_API kiln_status kiln_model_output_info(const kiln_model* model, size_t index,
                                            kiln_tensor_info* out);

/* Creates an executor and captures its graphs. model: borrowed (the executor takes its own
 * reference). mode: a kiln_graph_mode. out: on KILN_OK a new executor, caller frees with
 * kiln_executor_free; NULL on failure. */
KILN_API kiln_status kiln_executor_create(const kiln_model* model, int mode, kiln_executor** out);
/* Waits for the executor's work — including calls other threads are running on it — and
 * frees it. NULL is accepted. */
KILN_API void kiln_executor_free(kiln_executor* executor);

/* Runs one request: every model input once (any order, one size S for all), and any subset of
 * the outputs by name. Sizes, names, dtypes, ranks, dims and output capacities are all checked
 * before anything runs. Synchronous: on return the outputs are written.
 * executor: borrowed. inputs: borrowed array of n_inputs. outputs: borrowed array of n_outputs,
 * dtype/rank/shape written on KILN_OK. */
KILN_API kiln_status kiln_executor_run(kiln_executor* executor, const kiln_tensor* inputs,
                                       size_t n_inputs, kiln_tensor* outputs, size_t n_outputs);
/* kiln_executor_run ordered on the caller's CUDA stream instead of waiting (Executor::run_async):
 * kiln's work starts after everything enqueued on `stream` (a cudaStream_t; NULL is the legacy
 * default stream) before the call, anything enqueued on it after the call starts after kiln's
 * work, and the call returns without waiting for the device; the output shapes are written on
 * return, the data lands in stream order. Every input and output must be device memory
 * (on_device 1). A device fault surfaces on `stream` and at the executor's next call. */
KILN_API kiln_status kiln_executor_run_async(kiln_executor* executor, const kiln_tensor* inputs,
                                             size_t n_inputs, kiln_tensor* outputs,
                                             size_t n_outputs, void* stream);

/* The graph mode the executor runs (a kiln_graph_mode, after any downgrade: a model not
 * compiled for generation runs FULL_DECODE_ONLY as NONE and FULL_AND_PIECEWISE as PIECEWISE).
 * executor: borrowed. out: written. */
KILN_API kiln_status kiln_executor_mode(const kiln_executor* executor, int32_t* out);
/* Why the mode differs from the one asked for; "" when it does not. executor: borrowed. out:
 * written; the string is borrowed from the executor, valid while it lives. */
KILN_API kiln_status kiln_executor_downgrade_reason(const kiln_executor* executor,
                                                    const char** out);
/* The sizes with a captured CUDA graph, ascending (a request is padded up to the smallest one at
 * or above its size; larger ones run eagerly). executor: borrowed. sizes: written; the array is
 * borrowed from the executor, valid while it lives. n: written. */
KILN_API kiln_status kiln_executor_captured_sizes(const kiln_executor* executor,
                                                  const int64_t** sizes, size_t* n);

/* ---- Generation (kiln::Generator; runtime/README.md, "Generation") ----
 * A generator owns an executor, the paged KV cache and the sampling state of one model compiled
 * for generation. Sequences (caller-chosen int64 ids) are added, prefilled with their prompt,
 * stepped together in decode batches (each sequence its own length) and freed; tokens are
 * sampled on the GPU. On a cache error (KILN_RESOURCE_EXHAUSTED: too few free blocks or
 * max_sequences live; KILN_INVALID_ARGUMENT: past max_seq_len) nothing changed: the sequences
 * keep their state, and the caller frees or waits. */

typedef struct kiln_generator kiln_generator; /* keeps its model alive */

/* kiln_generator_options_init writes the defaults; start from them. */
typedef struct kiln_generator_options {
  int32_t mode; /* a kiln_graph_mode; default KILN_GRAPH_MODE_ARTIFACT */
  /* The KV cache's size: a number of blocks, or a fraction in (0, 1] of the device's free
   * memory; at most one of the two set. Default 0 and 0.0: the artifact's choice. */
  int64_t max_blocks;
  double memory_fraction;
  /* 1: each step can also return the logits of each sequence's last position (see
   * kiln_step_token.logits); default 0. */
  int32_t return_logits;
} kiln_generator_options;

/* kiln_sequence_options_init writes the defaults; start from them. */
typedef struct kiln_sequence_options {
  float temperature;      /* <= 0 (or top_k == 1): greedy; default 0 */
  int32_t top_k;          /* <= 0: off; default 0 */
  float top_p;            /* in (0, 1); >= 1: off; default 1 */
  uint64_t seed;          /* the same seed gives the same tokens; default 0 */
  int64_t max_new_tokens; /* >= 1; the sequence finishes with its max_new_tokens-th token;
                             default 16 */
  /* The sequence finishes after emitting one of these. Borrowed: copied by kiln_generator_add;
   * may be NULL when n_stop_tokens is 0. Default NULL, 0. */
  const int64_t* stop_tokens;
  size_t n_stop_tokens;
} kiln_sequence_options;

/* One sequence's result of a step. The caller sets logits and logits_capacity (zero both when
 * not wanted: they are read); the call writes seq, token and finished. */
typedef struct kiln_step_token {
  int64_t seq;
  int64_t token;
  int32_t finished; /* 1: a stop token or max_new_tokens was reached with this token */
  /* NULL, or borrowed caller memory of logits_capacity floats (>= kiln_generator_vocab_size)
   * into which the call writes the vocab_size logits the token was sampled from (needs a
   * generator created with return_logits = 1). */
  float* logits;
  size_t logits_capacity;
} kiln_step_token;

/* Mirrors kiln::KvCacheInfo. */
typedef struct kiln_kv_cache_info {
  int64_t num_blocks;
  int64_t free_blocks;
  int64_t block_size; /* tokens per block */
  int64_t max_sequences;
  int64_t max_seq_len;
  int64_t live_sequences;
  int64_t bytes; /* device memory of the cache tensors */
} kiln_kv_cache_info;

/* The defaults. out: written. NULL is ignored. */
KILN_API void kiln_generator_options_init(kiln_generator_options* out);
KILN_API void kiln_sequence_options_init(kiln_sequence_options* out);

/* Creates a generator: an executor (its graphs captured now), the KV cache and the sampling
 * state. model: borrowed (the generator takes its own reference). options: borrowed; NULL: the
 * defaults. out: on KILN_OK a new generator, caller frees with kiln_generator_free; NULL on
 * failure. KILN_INVALID_ARGUMENT when the model was not compiled for generation. */
KILN_API kiln_status kiln_generator_create(const kiln_model* model,
                                           const kiln_generator_options* options,
                                           kiln_generator** out);
/* Waits for the generator's work — including calls other threads are running on it — and
 * frees it (live sequences with it). NULL is accepted. */
KILN_API void kiln_generator_free(kiln_generator* generator);

/* A new empty sequence `seq`. generator: borrowed. options: borrowed (stop_tokens copied); NULL:
 * the defaults. KILN_INVALID_ARGUMENT when seq is live or an option is out of range;
 * KILN_RESOURCE_EXHAUSTED when max_sequences are live. */
KILN_API kiln_status kiln_generator_add(kiln_generator* generator, int64_t seq,
                                        const kiln_sequence_options* options);
/* Feeds the prompt (n >= 1 tokens in [0, vocab_size), appended to what the sequence holds; long
 * prompts run in chunks of at most the model's max_size) and samples the sequence's next token
 * from the last position. generator: borrowed. prompt: borrowed array of n. out: borrowed, one
 * entry, written on KILN_OK. Errors: KILN_NOT_FOUND for a sequence not added;
 * KILN_INVALID_ARGUMENT past max_seq_len or for a finished sequence; KILN_RESOURCE_EXHAUSTED
 * when the cache has too few free blocks — on a cache error nothing changed. */
KILN_API kiln_status kiln_generator_prefill(kiln_generator* generator, int64_t seq,
                                            const int64_t* prompt, size_t n, kiln_step_token* out);
/* One decode step for each of the n listed sequences (each once, each prefilled and not
 * finished): feeds each its last sampled token and samples the next. All-or-nothing on cache
 * errors, as prefill. n may be 0 (nothing happens). generator: borrowed. seqs: borrowed array
 * of n. out: borrowed array of n; out[i] is seqs[i]'s, written on KILN_OK. */
KILN_API kiln_status kiln_generator_decode(kiln_generator* generator, const int64_t* seqs, size_t n,
                                           kiln_step_token* out);
/* Ends a sequence (finished or not): its blocks return to the cache. KILN_NOT_FOUND for an
 * unknown sequence. generator: borrowed. */
KILN_API kiln_status kiln_generator_free_sequence(kiln_generator* generator, int64_t seq);

/* generator: borrowed. out: written. */
KILN_API kiln_status kiln_generator_kv_cache_info(const kiln_generator* generator,
                                                  kiln_kv_cache_info* out);
KILN_API kiln_status kiln_generator_vocab_size(const kiln_generator* generator, int64_t* out);
/* The graph mode the generator runs (a kiln_graph_mode, after any downgrade). */
KILN_API kiln_status kiln_generator_mode(const kiln_generator* generator, int32_t* out);
/* Why the mode differs from the one asked for; "" when it does not. generator: borrowed. out:
 * written; the string is borrowed from the generator, valid while it lives. */
KILN_API kiln_status kiln_generator_downgrade_reason(const kiln_generator* generator,
                                                     const char** out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_RUNTIME_H_ */
