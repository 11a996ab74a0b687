/* run_model.c — the C API end to end: load a kiln artifact, run one request, print the outputs
 * and optionally save them as .npy files.
 *
 * Build against an installed kiln (tools/examples/README.md):
 *   cc -std=c11 run_model.c $(pkg-config --cflags --libs kiln-runtime) -o run_model_c
 * Usage:
 *   run_model_c CACHE_DIR [NAME=FILE.npy ...] [--size S] [--out DIR]
 * Inputs not given as files are filled at size S (default 1) with small deterministic values
 * (example_tensor.h). Exit codes as the kiln CLI's: 0 success, 1 error, 3 no usable CUDA GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "example_tensor.h"
#include "kiln/runtime.h"
#include "npy.h"

#define MAX_TENSORS 64

typedef struct request {
  const char* dir;
  const char* out_dir;
  int64_t size;
  const char* files[MAX_TENSORS]; /* "name=path" */
  int n_files;
} request;

static int fail(const char* what) {
  fprintf(stderr, "run_model_c: %s: %s\n", what, kiln_last_error());
  return 1;
}

static int parse_args(int argc, char** argv, request* r) {
  int i;
  memset(r, 0, sizeof *r);
  r->size = 1;
  for (i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
      r->size = atoll(argv[++i]);
    } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      r->out_dir = argv[++i];
    } else if (strchr(argv[i], '=') && r->n_files < MAX_TENSORS) {
      r->files[r->n_files++] = argv[i];
    } else if (!r->dir && argv[i][0] != '-') {
      r->dir = argv[i];
    } else {
      return -1;
    }
  }
  return r->dir ? 0 : -1;
}

/* The file given for input `name`, or NULL. */
static const char* file_for(const request* r, const char* name) {
  int i;
  size_t n = strlen(name);
  for (i = 0; i < r->n_files; ++i)
    if (strncmp(r->files[i], name, n) == 0 && r->files[i][n] == '=') return r->files[i] + n + 1;
  return NULL;
}

/* Reads or fills every model input; sets *size to the request's size S. */
static int inputs_make(const kiln_model* model, const request* r, kiln_tensor* in,
                       npy_array* arrays, size_t n, int64_t* size) {
  size_t i;
  int32_t d;
  char err[512];
  *size = r->size;
  for (i = 0; i < n; ++i) {
    kiln_tensor_info info;
    const char* path;
    if (kiln_model_input_info(model, i, &info) != KILN_OK) return fail("input info");
    path = file_for(r, info.name);
    if (path) {
      if (npy_read(path, &arrays[i], err, sizeof err) != 0) {
        fprintf(stderr, "run_model_c: input '%s': %s\n", info.name, err);
        return 1;
      }
      if (info.size_axis >= 0 && info.size_axis < arrays[i].rank && info.coef[info.size_axis])
        *size = (arrays[i].shape[info.size_axis] - info.offset[info.size_axis]) /
                info.coef[info.size_axis];
    } else {
      arrays[i].dtype = info.dtype;
      arrays[i].rank = info.rank;
      for (d = 0; d < info.rank; ++d) arrays[i].shape[d] = info.coef[d] * r->size + info.offset[d];
      if (example_fill(&arrays[i]) != 0) {
        fprintf(stderr, "run_model_c: input '%s': cannot fill its dtype\n", info.name);
        return 1;
      }
    }
    in[i].name = info.name;
    in[i].dtype = arrays[i].dtype;
    in[i].rank = arrays[i].rank;
    memcpy(in[i].shape, arrays[i].shape, sizeof in[i].shape);
    in[i].data = arrays[i].data;
    in[i].bytes = arrays[i].bytes;
    in[i].on_device = 0;
  }
  return 0;
}

/* Host buffers for every output at size S. */
static int outputs_make(const kiln_model* model, int64_t size, kiln_tensor* out, size_t n) {
  size_t i;
  int32_t d;
  for (i = 0; i < n; ++i) {
    kiln_tensor_info info;
    int64_t numel = 1;
    if (kiln_model_output_info(model, i, &info) != KILN_OK) return fail("output info");
    for (d = 0; d < info.rank; ++d) numel *= info.coef[d] * size + info.offset[d];
    memset(&out[i], 0, sizeof out[i]);
    out[i].name = info.name;
    out[i].bytes = (size_t)numel * kiln_dtype_size(info.dtype);
    out[i].data = malloc(out[i].bytes ? out[i].bytes : 1);
    if (!out[i].data) return fail("out of host memory");
  }
  return 0;
}

static int outputs_print(const request* r, const kiln_tensor* out, size_t n) {
  size_t i;
  int32_t d;
  for (i = 0; i < n; ++i) {
    npy_array a;
    a.dtype = out[i].dtype;
    a.rank = out[i].rank;
    memcpy(a.shape, out[i].shape, sizeof a.shape);
    a.data = out[i].data;
    a.bytes = out[i].bytes;
    printf("%s [", out[i].name);
    for (d = 0; d < out[i].rank; ++d) printf(d ? ", %lld" : "%lld", (long long)out[i].shape[d]);
    printf("]\n  first values:");
    example_print_head(&a, 6);
    printf("\n  sum: %.6f\n", example_sum(&a));
    if (r->out_dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/%s.npy", r->out_dir, out[i].name);
      example_safe_name(path + strlen(r->out_dir) + 1);
      if (npy_write(path, a.dtype, a.rank, a.shape, a.data, example_bytes(&a)) != 0) {
        fprintf(stderr, "run_model_c: cannot write %s\n", path);
        return 1;
      }
      printf("  saved: %s\n", path);
    }
  }
  return 0;
}

int main(int argc, char** argv) {
  request r;
  kiln_model* model = NULL;
  kiln_executor* executor = NULL;
  kiln_tensor in[MAX_TENSORS], out[MAX_TENSORS];
  npy_array arrays[MAX_TENSORS];
  size_t n_in = 0, n_out = 0, i;
  int64_t size = 1;
  int rc = 1;
  if (parse_args(argc, argv, &r) != 0) {
    fprintf(stderr, "usage: run_model_c CACHE_DIR [NAME=FILE.npy ...] [--size S] [--out DIR]\n");
    return 2;
  }
  if (!kiln_device_available()) {
    printf("run_model_c: %s\nThe artifact needs a CUDA GPU to run.\n", kiln_last_error());
    return 3;
  }
  memset(arrays, 0, sizeof arrays);
  memset(out, 0, sizeof out);
  if (kiln_model_load(r.dir, &model) != KILN_OK) return fail(r.dir);
  if (kiln_model_input_count(model, &n_in) != KILN_OK ||
      kiln_model_output_count(model, &n_out) != KILN_OK || n_in > MAX_TENSORS ||
      n_out > MAX_TENSORS) {
    fail("model inputs/outputs");
    goto done;
  }
  if (inputs_make(model, &r, in, arrays, n_in, &size) != 0) goto done;
  if (outputs_make(model, size, out, n_out) != 0) goto done;
  if (kiln_executor_create(model, KILN_GRAPH_MODE_ARTIFACT, &executor) != KILN_OK) {
    fail("executor");
    goto done;
  }
  if (kiln_executor_run(executor, in, n_in, out, n_out) != KILN_OK) {
    fail("run");
    goto done;
  }
  printf("ran %s at size %lld\n", r.dir, (long long)size);
  if (r.out_dir) mkdir(r.out_dir, 0777); /* may exist; a failed write says so below */
  rc = outputs_print(&r, out, n_out);
done:
  for (i = 0; i < MAX_TENSORS; ++i) {
    npy_free(&arrays[i]);
    free(out[i].data);
  }
  kiln_executor_free(executor);
  kiln_model_free(model);
  return rc;
}
