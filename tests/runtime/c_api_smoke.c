/* Compiled as C (not C++): kiln/runtime.h is valid C, links against libkiln_runtime, and its
 * error paths answer with a status and a message. Needs no GPU.
 * Usage: c_api_smoke [artifact-or-cache-dir] — with a directory, also loads it: OK with a GPU,
 * a clean error otherwise; either way exit 0 unless the API misbehaves. */
#include <stdio.h>
#include <string.h>

#include "kiln/runtime.h"

static int failures = 0;

static void expect(int ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FAILED: %s (last error: '%s')\n", what, kiln_last_error());
    ++failures;
  }
}

int main(int argc, char** argv) {
  kiln_model* model = NULL;
  kiln_executor* executor = NULL;
  size_t n = 0;
  kiln_status st = kiln_model_load("/nonexistent/kiln-artifact", &model);
  expect(st == KILN_NOT_FOUND, "a missing directory is KILN_NOT_FOUND");
  expect(model == NULL, "no model on failure");
  expect(strstr(kiln_last_error(), "/nonexistent/kiln-artifact") != NULL,
         "the message names the directory");
  expect(kiln_model_load(NULL, &model) == KILN_INVALID_ARGUMENT, "a NULL dir");
  expect(kiln_model_input_count(NULL, &n) == KILN_INVALID_ARGUMENT, "a NULL model");
  expect(kiln_executor_create(NULL, KILN_GRAPH_MODE_FULL, &executor) == KILN_INVALID_ARGUMENT,
         "a NULL model for an executor");
  expect(kiln_executor_run(NULL, NULL, 0, NULL, 0) == KILN_INVALID_ARGUMENT, "a NULL executor");
  expect(strcmp(kiln_status_name(KILN_DATA_LOSS), "DATA_LOSS") == 0, "status names");
  expect(kiln_dtype_size(KILN_DTYPE_I64) == 8, "dtype sizes");
  kiln_model_free(NULL);
  kiln_executor_free(NULL);
  printf("cuda device: %s\n", kiln_device_available() ? "available" : kiln_last_error());
  if (argc > 1) {
    st = kiln_model_load(argv[1], &model);
    printf("load %s: %s %s\n", argv[1], kiln_status_name(st), kiln_last_error());
    expect((st == KILN_OK) == (model != NULL), "a model exactly when KILN_OK");
    if (st == KILN_OK) {
      st = kiln_executor_create(model, KILN_GRAPH_MODE_ARTIFACT, &executor);
      printf("executor: %s %s\n", kiln_status_name(st), kiln_last_error());
      kiln_executor_free(executor);
    }
    kiln_model_free(model);
  }
  printf("%s\n", failures == 0 ? "c_api_smoke: ok" : "c_api_smoke: FAILED");
  return failures == 0 ? 0 : 1;
}
