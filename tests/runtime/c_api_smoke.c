/* Compiled as C (not C++): kiln/runtime.h is valid C, links against libkiln_runtime, and its
 * error paths answer with a status and a message. Needs no GPU.
 * Usage: c_api_smoke [artifact-or-cache-dir] — with a directory, also loads it: OK with a GPU,
 * a clean error otherwise; a loaded model then gets an executor and a generator (OK for a model
 * compiled for generation, a clean error otherwise). Either way exit 0 unless the API
 * misbehaves. */
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
  expect(kiln_executor_run_async(NULL, NULL, 0, NULL, 0, NULL) == KILN_INVALID_ARGUMENT,
         "a NULL executor, ordered on a stream");
  {
    int32_t mode = 0;
    const char* reason = NULL;
    const int64_t* sizes = NULL;
    size_t n_sizes = 0;
    expect(kiln_executor_mode(NULL, &mode) == KILN_INVALID_ARGUMENT, "mode of a NULL executor");
    expect(strstr(kiln_last_error(), "executor") != NULL, "the message names the argument");
    expect(kiln_executor_downgrade_reason(NULL, &reason) == KILN_INVALID_ARGUMENT,
           "downgrade reason of a NULL executor");
    expect(kiln_executor_captured_sizes(NULL, &sizes, &n_sizes) == KILN_INVALID_ARGUMENT,
           "captured sizes of a NULL executor");
  }
  expect(strcmp(kiln_status_name(KILN_DATA_LOSS), "DATA_LOSS") == 0, "status names");
  expect(kiln_dtype_size(KILN_DTYPE_I64) == 8, "dtype sizes");
  kiln_model_free(NULL);
  kiln_executor_free(NULL);
  {
    kiln_generator* generator = NULL;
    kiln_generator_options go;
    kiln_sequence_options so;
    kiln_step_token token = {0};
    kiln_kv_cache_info info;
    const int64_t prompt[2] = {1, 2};
    kiln_generator_options_init(&go);
    kiln_sequence_options_init(&so);
    expect(go.mode == KILN_GRAPH_MODE_ARTIFACT && so.max_new_tokens == 16 && so.top_p == 1.0f,
           "option defaults");
    expect(kiln_generator_create(NULL, &go, &generator) == KILN_INVALID_ARGUMENT &&
               generator == NULL,
           "a NULL model for a generator");
    expect(strstr(kiln_last_error(), "model is NULL") != NULL, "the message names the argument");
    expect(kiln_generator_add(NULL, 0, &so) == KILN_INVALID_ARGUMENT, "a NULL generator");
    expect(kiln_generator_prefill(NULL, 0, prompt, 2, &token) == KILN_INVALID_ARGUMENT,
           "prefill: a NULL generator");
    expect(kiln_generator_decode(NULL, prompt, 2, &token) == KILN_INVALID_ARGUMENT,
           "decode: a NULL generator");
    expect(kiln_generator_kv_cache_info(NULL, &info) == KILN_INVALID_ARGUMENT,
           "kv_cache_info: a NULL generator");
    kiln_generator_free(NULL);
  }
  printf("cuda device: %s\n", kiln_device_available() ? "available" : kiln_last_error());
  if (argc > 1) {
    st = kiln_model_load(argv[1], &model);
    printf("load %s: %s %s\n", argv[1], kiln_status_name(st), kiln_last_error());
    expect((st == KILN_OK) == (model != NULL), "a model exactly when KILN_OK");
    if (st == KILN_OK) {
      st = kiln_executor_create(model, KILN_GRAPH_MODE_ARTIFACT, &executor);
      printf("executor: %s %s\n", kiln_status_name(st), kiln_last_error());
      kiln_executor_free(executor);
      kiln_generator* generator = NULL;
      st = kiln_generator_create(model, NULL, &generator);
      printf("generator: %s %s\n", kiln_status_name(st), kiln_last_error());
      expect((st == KILN_OK) == (generator != NULL), "a generator exactly when KILN_OK");
      kiln_generator_free(generator);
    }
    kiln_model_free(model);
  }
  printf("%s\n", failures == 0 ? "c_api_smoke: ok" : "c_api_smoke: FAILED");
  return failures == 0 ? 0 : 1;
}
