// What the GEMM-with-GELU prototypes (tests/kernels/bench_tiled_gemm.cc, bench_wgmma_gemm.cc)
// share: the shapes, their data (weights in enough copies that no GEMM finds its weights in L2),
// the baseline (cuBLASLt with its bias epilogue, alone and followed by kiln's erf-GELU kernel),
// the output check and the JSON line each (shape, way) prints.
//
// The product: D [M, N] = gelu(A [M, K] · W [N, K]^T + bias), fp16 in and out, fp32 sums, every
// matrix row-major (W as the compiler's GEMMs keep it, K contiguous).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "tests/kernels/bench_common.h"
#include "tests/kernels/bench_cublaslt.h"

namespace kiln::bench::gemm {

// Each way is one graph of kLaunches GEMMs, timed as the median of kRepeats replays.
constexpr int kLaunches = 20, kRepeats = 15;
// Largest |got - want| / (1 + |want|) an output may show: a prototype and cuBLASLt round the
// pre-activation differently.
constexpr double kTolerance = 2e-2;

// For NVRTC, ahead of a prototype's source: bench_gelu, the erf-GELU kernel as kiln generates it
// (kiln::op_gelu, 8 halves a thread), which follows cuBLASLt in the baseline; the prototypes'
// epilogues use the same kiln::op_gelu.
constexpr const char* kGeluSource = R"(
#include "common.cuh"
#include "dtype.cuh"
#include "elementwise.cuh"

extern "C" __global__ void __launch_bounds__(256) bench_gelu(const kiln::f16* __restrict__ x,
                                                             kiln::f16* __restrict__ y,
                                                             long long n) {
  using namespace kiln;
  const long long nv = n / 8;
  for (long long v = global_thread_index(); v < nv; v += global_thread_count()) {
    const Vec<f16, 8> a = load_vec<f16, 8>(x + v * 8);
    Vec<f16, 8> r;
#pragma unroll
    for (int k = 0; k < 8; ++k) r.v[k] = from_f32<f16>(op_gelu(to_f32(a.v[k])));
    store_vec<f16, 8>(y + v * 8, r);
  }
}
)";

struct Shape {
  const char* name;
  int64_t m, n, k;
};
// BERT-base's FC (768 -> 3072, erf GELU) at batch 1 / 8 / 32 of 128 tokens; the same product at
// a Llama-sized width for scale.
constexpr Shape kShapes[] = {
    {"bert_fc_b1", 128, 3072, 768},
    {"bert_fc_b8", 1024, 3072, 768},
    {"bert_fc_b32", 4096, 3072, 768},
    {"wide_512", 512, 5632, 2048},
};

// The shapes named among argv[1..] (every shape when none is).
inline std::vector<Shape> shapes_from_args(int argc, char** argv) {
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i)
    for (const Shape& s : kShapes)
      if (std::strcmp(argv[i], s.name) == 0) shapes.push_back(s);
  if (shapes.empty()) shapes.assign(std::begin(kShapes), std::end(kShapes));
  return shapes;
}

struct Data {
  int64_t m = 0, n = 0, k = 0, copies = 1;
  void* a = nullptr;
  std::vector<void*> w;
  void* bias = nullptr;
  void* d = nullptr;    // the prototype's output
  void* pre = nullptr;  // cuBLASLt's product (+ bias)
  void* ref = nullptr;  // GELU of it
};

// Random operands on the device: A, bias, and W in enough copies (at least 128 MB of them, 2 to
// 20) that a graph rotating through them finds no GEMM's weights in L2.
inline bool alloc_data(const char* who, const Shape& s, Data* d) {
  d->m = s.m;
  d->n = s.n;
  d->k = s.k;
  const size_t wbytes = static_cast<size_t>(s.n * s.k) * 2;
  d->copies = std::clamp<int64_t>(static_cast<int64_t>((size_t{128} << 20) / wbytes) + 1, 2, 20);
  std::mt19937 rng(static_cast<uint32_t>(s.m * 31 + s.n));
  std::vector<uint16_t> host(static_cast<size_t>(std::max(s.m * s.k, s.n * s.k)));
  auto fill = [&](void** dst, size_t count, int lo, int hi) {
    for (size_t i = 0; i < count; ++i) host[i] = random_half(rng, lo, hi);
    return cuda_ok(who, cudaMalloc(dst, count * 2), "cudaMalloc") &&
           cuda_ok(who, cudaMemcpy(*dst, host.data(), count * 2, cudaMemcpyHostToDevice),
                   "cudaMemcpy");
  };
  // Activations in [1/4, 2), weights in [1/64, 1/8) (the sums stay in fp16's range).
  if (!fill(&d->a, static_cast<size_t>(s.m * s.k), 13, 15)) return false;
  d->w.resize(static_cast<size_t>(d->copies));
  for (void*& w : d->w)
    if (!fill(&w, static_cast<size_t>(s.n * s.k), 9, 11)) return false;
  if (!fill(&d->bias, static_cast<size_t>(s.n), 12, 14)) return false;
  for (void** p : {&d->d, &d->pre, &d->ref})
    if (!cuda_ok(who, cudaMalloc(p, static_cast<size_t>(s.m * s.n) * 2), "cudaMalloc"))
      return false;
  return true;
}

inline void free_data(Data* d) {
  for (void* p : {d->a, d->bias, d->d, d->pre, d->ref}) cudaFree(p);
  for (void* w : d->w) cudaFree(w);
}

// The largest |got - want| / (1 + |want|) over an m x n output (got: fp16 bits, row-major).
// When it reaches kTolerance, says on stderr where: how many elements, the rows and columns they
// span, and the first few as (row, col, got, want), so one run localises a wrong tile or fragment.
inline double compare_output(const char* who, const std::string& what, const uint16_t* got,
                             const float* want, int64_t m, int64_t n) {
  double worst = 0;
  int64_t bad = 0, r0 = m, r1 = -1, c0 = n, c1 = -1;
  std::string first;
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const double g = half_to_float(got[r * n + c]), w = want[r * n + c];
      const double e = std::isfinite(g) ? std::fabs(g - w) / (1.0 + std::fabs(w)) : INFINITY;
      worst = std::max(worst, e);
      if (!(e < kTolerance)) {
        if (++bad <= 4) first += fmt::format(" ({}, {}, got {}, want {})", r, c, g, w);
        r0 = std::min(r0, r), r1 = std::max(r1, r), c0 = std::min(c0, c), c1 = std::max(c1, c);
      }
    }
  if (bad > 0)
    std::fprintf(stderr,
                 "%s: %s: %lld of %lld elements off (rows %lld..%lld, cols %lld..%lld):%s\n", who,
                 what.c_str(), static_cast<long long>(bad), static_cast<long long>(m * n),
                 static_cast<long long>(r0), static_cast<long long>(r1), static_cast<long long>(c0),
                 static_cast<long long>(c1), first.c_str());
  return worst;
}

// The prototype's output (d.d) against `want` (an m x n fp16 output on the device: cuBLASLt +
// GELU's d.ref, or cuBLASLt's bias-only d.pre): *err as compare_output's.
inline bool max_error(const char* who, const std::string& what, const Data& d, const void* want_d,
                      double* err) {
  const size_t n = static_cast<size_t>(d.m * d.n);
  std::vector<uint16_t> got(n), want_bits(n);
  if (!cuda_ok(who, cudaMemcpy(got.data(), d.d, n * 2, cudaMemcpyDeviceToHost), "cudaMemcpy") ||
      !cuda_ok(who, cudaMemcpy(want_bits.data(), want_d, n * 2, cudaMemcpyDeviceToHost),
               "cudaMemcpy"))
    return false;
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = half_to_float(want_bits[i]);
  *err = compare_output(who, what, got.data(), want.data(), d.m, d.n);
  return true;
}

// One JSON line: {"shape", "m", "n", "k", "way", "config", "us", "tflops", "max_err"}.
inline void print(const Shape& s, const char* way, const std::string& config, double us,
                  double err) {
  const double tflops = 2.0 * s.m * s.n * s.k / (us * 1e-6) / 1e12;
  std::printf(
      "{\"shape\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"way\": \"%s\", \"config\": "
      "\"%s\", \"us\": %.2f, \"tflops\": %.1f, \"max_err\": %.2e}\n",
      s.name, static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k),
      way, config.c_str(), us, tflops, err);
  std::fflush(stdout);
}

// cuBLASLt (bias epilogue), alone and followed by the GELU kernel: the fastest of the heuristic's
// first 8 algorithms. Leaves cuBLASLt + GELU's output in d.ref.
inline bool time_cublaslt(const char* who, cublasLtHandle_t lt, cudaKernel_t gelu, const Shape& s,
                          Data& d) {
  LtProduct p;
  if (!p.init(who, s.m, s.n, s.k, d.bias)) return false;
  const uint64_t ws_bytes = LtProduct::kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t results[8] = {};
  int returned = 0;
  if (!lt_ok(who,
             cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.w, p.a, p.d, p.d, p.pref, 8, results,
                                            &returned),
             "cublasLtMatmulAlgoGetHeuristic"))
    return false;
  if (returned < 1) {
    std::fprintf(stderr, "%s: no cuBLASLt algorithm for %s\n", who, s.name);
    return false;
  }
  void* ws = nullptr;
  if (!cuda_ok(who, cudaMalloc(&ws, ws_bytes), "cudaMalloc")) return false;
  const int64_t n = s.m * s.n;
  const dim3 gelu_grid(static_cast<unsigned>(std::min<int64_t>((n / 8 + 255) / 256, 65535)));
  // The GEMM of weight copy c with algorithm i, then (with_gelu) the GELU kernel.
  auto launch = [&](int i, bool with_gelu, int64_t c, cudaStream_t st) {
    const float alpha = 1.0f, beta = 0.0f;
    if (!lt_ok(
            who,
            cublasLtMatmul(lt, p.desc, &alpha, d.w[static_cast<size_t>(c % d.copies)], p.w, d.a,
                           p.a, &beta, d.pre, p.d, d.pre, p.d, &results[i].algo, ws, ws_bytes, st),
            "cublasLtMatmul"))
      return false;
    if (!with_gelu) return true;
    void* x = d.pre;
    void* y = d.ref;
    long long count = n;
    void* args[] = {&x, &y, &count};
    return cuda_ok(
        who,
        cudaLaunchKernel(reinterpret_cast<const void*>(gelu), gelu_grid, dim3(256), args, 0, st),
        "cudaLaunchKernel(bench_gelu)");
  };
  double best = INFINITY, best_with_gelu = 0;
  int best_i = -1;
  for (int i = 0; i < returned; ++i) {
    double ms = 0;
    auto gemm = [&](int64_t c, cudaStream_t st) { return launch(i, false, c, st); };
    if (!time_graph_ms(kLaunches, gemm, kRepeats, &ms)) {
      (void)cudaGetLastError();
      continue;  // an algorithm that does not run here
    }
    if (ms < best) {
      best = ms;
      best_i = i;
    }
  }
  bool ok = best_i >= 0;
  auto gemm_gelu = [&](int64_t c, cudaStream_t st) { return launch(best_i, true, c, st); };
  ok = ok && time_graph_ms(kLaunches, gemm_gelu, kRepeats, &best_with_gelu);
  // The reference: the first copy's product, then its GELU.
  ok = ok && gemm_gelu(0, nullptr) &&
       cuda_ok(who, cudaDeviceSynchronize(), "cudaDeviceSynchronize (cuBLASLt)");
  if (ok) {
    const std::string config = fmt::format("heuristic #{} of {}", best_i, returned);
    print(s, "cublaslt", config, best * 1e3 / kLaunches, 0);
    print(s, "cublaslt+gelu", config, best_with_gelu * 1e3 / kLaunches, 0);
  }
  cudaFree(ws);
  return ok;
}

// What check_and_time found: whether the output was within kTolerance, the time of one GEMM and
// the output's error.
struct Timed {
  bool within = false;
  double us = 0, err = 0;
};

// A prototype's way: launch(0, default stream) once into d.d (first filled with NaNs) and checked
// against d.ref (cuBLASLt + GELU; with bias_only, d.pre: cuBLASLt's bias epilogue alone), then
// timed as a graph of launch(i, stream) for i < kLaunches; prints its line.
template <typename Launch>
bool check_and_time(const char* who, const Shape& s, Data& d, const char* way,
                    const std::string& config, Launch launch, Timed* t, bool bias_only = false) {
  double ms = 0;
  if (!cuda_ok(who, cudaMemset(d.d, 0xFF, static_cast<size_t>(s.m * s.n) * 2), "cudaMemset") ||
      !launch(0, nullptr) || !cuda_ok(who, cudaDeviceSynchronize(), "cudaDeviceSynchronize") ||
      !max_error(who, fmt::format("{} {} {}", s.name, way, config), d, bias_only ? d.pre : d.ref,
                 &t->err) ||
      !time_graph_ms(kLaunches, launch, kRepeats, &ms))
    return false;
  t->within = t->err < kTolerance;
  t->us = ms * 1e3 / kLaunches;
  print(s, way, config, t->us, t->err);
  return true;
}

// NVRTC-compiles a prototype's module (kiln's kernel headers includable) for `arch` into *cubin;
// with KILN_BENCH_SOURCE=FILE set, writes the source to FILE first (for nvcc -Xptxas -v). False,
// with NVRTC's log on stderr, when it does not compile.
inline bool compile_module(const char* who, const std::string& source, const std::string& arch,
                           std::vector<uint8_t>* cubin) {
  if (const char* dump = std::getenv("KILN_BENCH_SOURCE")) std::ofstream(dump) << source;
  auto compiled = compiler::nvrtc_compile({who, source, compiler::kernel_headers()}, arch);
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s: %s\n", who, compiled.status().to_string().c_str());
    return false;
  }
  *cubin = std::move(*compiled);
  return true;
}

// Loads the NVRTC-compiled module (its source began with kGeluSource) and finds bench_gelu.
inline bool load_library(const char* who, const std::vector<uint8_t>& cubin, cudaLibrary_t* lib,
                         cudaKernel_t* gelu) {
  return cuda_ok(who,
                 cudaLibraryLoadData(lib, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
                 "cudaLibraryLoadData") &&
         cuda_ok(who, cudaLibraryGetKernel(gelu, *lib, "bench_gelu"), "bench_gelu");
}

// For each shape: its data, the cuBLASLt baseline's two lines, then ways(shape, data,
// &all_within), which times the prototype's ways and clears all_within when an output is off.
// True when every step ran and every output was within the tolerance.
template <typename Ways>
bool for_each_shape(const char* who, const std::vector<Shape>& shapes, cudaKernel_t gelu,
                    Ways ways) {
  cublasLtHandle_t lt = nullptr;
  if (!lt_ok(who, cublasLtCreate(&lt), "cublasLtCreate")) return false;
  bool ok = true, all_within = true;
  for (const Shape& s : shapes) {
    Data d;
    ok = alloc_data(who, s, &d) && time_cublaslt(who, lt, gelu, s, d) && ways(s, d, &all_within) &&
         ok;
    free_data(&d);
  }
  cublasLtDestroy(lt);
  if (!all_within) std::fprintf(stderr, "%s: a prototype output is off the reference\n", who);
  return ok && all_within;
}

}  // namespace kiln::bench::gemm
