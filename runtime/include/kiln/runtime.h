/* kiln/runtime.h — the C API of libkiln_runtime: load a compiled kiln artifact, create
 * executors (each captures its CUDA graphs when created) and run them.
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
 * model share its weights). Freeing an object while another thread uses it is undefined.
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
  KILN_IO_ERROR = 8             /* the operating system refused a file operation */
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
/* Waits for the executor's work and frees it. NULL is accepted. */
KILN_API void kiln_executor_free(kiln_executor* executor);

/* Runs one request: every model input once (any order, one size S for all), and any subset of
 * the outputs by name. Sizes, names, dtypes, ranks, dims and output capacities are all checked
 * before anything runs. Synchronous: on return the outputs are written.
 * executor: borrowed. inputs: borrowed array of n_inputs. outputs: borrowed array of n_outputs,
 * dtype/rank/shape written on KILN_OK. */
KILN_API kiln_status kiln_executor_run(kiln_executor* executor, const kiln_tensor* inputs,
                                       size_t n_inputs, kiln_tensor* outputs, size_t n_outputs);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_RUNTIME_H_ */
