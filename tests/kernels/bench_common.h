// Pieces the kernel benchmarks share (tests/kernels/bench_*.cc): fp16 values on the host, and
// timing a run of launches captured as one CUDA graph.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "runtime/median.h"

namespace kiln::bench {

// This machine's GPU as NVRTC names its architecture ("sm_90"), with its properties; empty (and
// "<who>: no CUDA device" on stderr) without one.
inline std::string device_arch(const char* who, cudaDeviceProp* prop) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(prop, device) != cudaSuccess) {
    std::fprintf(stderr, "%s: no CUDA device\n", who);
    return "";
  }
  return "sm_" + std::to_string(prop->major) + std::to_string(prop->minor);
}

// True on cudaSuccess; else "<who>: <what>: <error>" on stderr and false.
inline bool cuda_ok(const char* who, cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "%s: %s: %s\n", who, what, cudaGetErrorString(e));
  return false;
}

// The value of fp16 bits `h`.
inline float half_to_float(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(1024 + mant), exp - 25);
}

// Random fp16 bits with a biased exponent in [lo, hi] (15 is [1, 2)), random mantissa and sign.
inline uint16_t random_half(std::mt19937& rng, int lo, int hi) {
  const uint32_t r = rng();
  const uint32_t exp = static_cast<uint32_t>(lo) + (r >> 16) % static_cast<uint32_t>(hi - lo + 1);
  return static_cast<uint16_t>((r & 0x8000u) | (exp << 10) | (r & 0x3ffu));
}

// Captures launch(i, stream) for i < count as one graph on a stream of its own, replays it once
// to warm up, then `repeats` times between events: *ms is the median replay. False (with the
// CUDA error on stderr) on any failure, or when `launch` returns false.
template <typename Launch>
bool time_graph_ms(int64_t count, Launch launch, int repeats, double* ms) {
  cudaStream_t st = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<double> times;
  const auto ok = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess)
      std::fprintf(stderr, "time_graph_ms: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
  };
  bool good = ok(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "stream") &&
              ok(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), "capture");
  for (int64_t i = 0; good && i < count; ++i) good = launch(i, st);
  if (st != nullptr) good = ok(cudaStreamEndCapture(st, &graph), "end capture") && good;
  good = good && ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate") &&
         ok(cudaEventCreate(&e0), "event") && ok(cudaEventCreate(&e1), "event") &&
         ok(cudaGraphLaunch(exec, st), "warm-up replay");
  for (int i = 0; good && i < repeats; ++i) {
    float t = 0;
    good = ok(cudaEventRecord(e0, st), "record") && ok(cudaGraphLaunch(exec, st), "replay") &&
           ok(cudaEventRecord(e1, st), "record") && ok(cudaEventSynchronize(e1), "replay") &&
           ok(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    times.push_back(t);
  }
  if (good) *ms = runtime::median(times);
  if (e1 != nullptr) cudaEventDestroy(e1);
  if (e0 != nullptr) cudaEventDestroy(e0);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (st != nullptr) cudaStreamDestroy(st);
  return good;
}

}  // namespace kiln::bench
