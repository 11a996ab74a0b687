// Prototype measurement (not a test, not used by the compiler; needs a GPU): would a tensor-core
// GEMM of kiln's own, with the activation in its epilogue, beat cuBLASLt plus the separate
// activation kernel at prefill sizes? The question behind issue 15's fusions that cuBLASLt cannot
// take: BERT's exact (erf) GELU after its FC GEMM runs as a kernel of its own, because
// cuBLASLt's GELU epilogue is the tanh form.
//
// The prototype below is an Ampere-style GEMM on mma.sync m16n8k16 (fp16 in, fp32 sums): block
// tiles of BM x BN over K steps of BK, STAGES shared-memory stages filled by cp.async, ldmatrix
// fragments, WM x WN warps, and an epilogue adding the bias and applying the erf GELU before the
// fp16 store. D [M, N] = gelu(A [M, K] · W [N, K]^T + bias) (W as the compiler's skinny GEMMs
// keep it, K contiguous). Against it, in the same process: cuBLASLt with its bias epilogue (the
// fastest of its heuristic's first 8 algorithms, each timed), then a vectorised erf-GELU kernel
// as kiln generates it (8 halves a thread), the two in one graph.
//
//   build/tests/kernels/kernels_bench_tiled_gemm [SHAPE...]   (default: every shape below)
//   build/tests/kernels/kernels_bench_tiled_gemm --compile-only   (NVRTC for sm_90; no GPU)
//   KILN_BENCH_SOURCE=FILE: the module's source written to FILE (for nvcc -Xptxas -v).
//
// Each way is captured as one CUDA graph of 20 GEMMs in a row, rotating through copies of the
// weights (at least 128 MB of them, so no GEMM finds its weights in L2, as in a model whose
// every layer has its own), and timed as the median of 15 replays over 20. The prototype's
// output is checked against cuBLASLt + GELU (largest |diff| / (1 + |ref|), must stay below
// 2e-2: the two round the pre-activation differently). Prints one JSON line per (shape, way):
// {"shape", "m", "n", "k", "way", "config", "us", "tflops", "max_err"}.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "tests/kernels/bench_common.h"
#include "tests/kernels/bench_cublaslt.h"

namespace {

namespace compiler = kiln::compiler;
constexpr const char* kWho = "bench_tiled_gemm";
constexpr int kLaunches = 20, kRepeats = 15;

#define CHECK_CUDA(call) \
  if (!kiln::bench::cuda_ok(kWho, (call), #call)) return false
#define CHECK_LT(call) \
  if (!kiln::bench::lt_ok(kWho, (call), #call)) return false

// The prototype and the GELU kernel, for NVRTC (kiln's headers supply cp.async, ldmatrix, mma).
constexpr const char* kSource = R"(
#include "attention.cuh"
namespace bench {
using namespace kiln;

__device__ __forceinline__ float gelu_erf(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

// ROWS rows of BK elements (from column k0) of rows row0.. of src ([*, K] row-major) into shared
// memory at dst (row pitch BK + 8: the rows an ldmatrix reads start in distinct bank groups) by
// NT threads; rows at or past `limit` and columns past K are zero-filled.
template <int ROWS, int BK, int NT>
__device__ __forceinline__ void load_rows(unsigned dst, const unsigned short* src, int row0,
                                          int limit, int k0, int K, int tid) {
  constexpr int CH = BK / 8, P = BK + 8;
#pragma unroll
  for (int c = tid; c < ROWS * CH; c += NT) {
    const int r = c / CH, col = (c % CH) * 8, gr = row0 + r, gk = k0 + col;
    const bool in = gr < limit && gk < K;
    cp_async16(dst + (r * P + col) * 2, in ? src + (long long)gr * K + gk : src, in ? 16 : 0);
  }
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, bool GELU>
__device__ void tiled_gemm(const unsigned short* __restrict__ a,
                           const unsigned short* __restrict__ w, const f16* __restrict__ bias,
                           f16* __restrict__ d, int M, int N, int K) {
  constexpr int NT = 32 * WM * WN, P = BK + 8;
  constexpr int TM = BM / WM, TN = BN / WN, MT = TM / 16, NB = TN / 8;
  static_assert(TM % 16 == 0 && TN % 16 == 0 && BK % 16 == 0, "tiles");
  constexpr int kStageA = BM * P, kStageB = BN * P;
  extern __shared__ __align__(16) unsigned short smem[];
  const unsigned sA = smem_addr(smem), sB = sA + STAGES * kStageA * 2;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp / WN, wn = warp % WN;
  const int n_tiles = (N + BN - 1) / BN;
  const int m0 = (blockIdx.x / n_tiles) * BM, n0 = (blockIdx.x % n_tiles) * BN;
  if (m0 >= M) return;
  const int KT = (K + BK - 1) / BK;
  auto load = [&](int stage, int kt) {
    load_rows<BM, BK, NT>(sA + stage * kStageA * 2, a, m0, M, kt * BK, K, tid);
    load_rows<BN, BK, NT>(sB + stage * kStageB * 2, w, n0, N, kt * BK, K, tid);
  };
  float acc[MT][NB][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int j = 0; j < NB; ++j) acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load(s, s);
    cp_async_commit();
  }
  const int mi = lane >> 3, r8 = lane & 7;
  for (int kt = 0; kt < KT; ++kt) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    if (kt + STAGES - 1 < KT) load((kt + STAGES - 1) % STAGES, kt + STAGES - 1);
    cp_async_commit();
    const int st = kt % STAGES;
    const unsigned aBase = sA + st * kStageA * 2, bBase = sB + st * kStageB * 2;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      unsigned af[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        ldmatrix_x4(af[mt],
                    aBase + ((wm * TM + mt * 16 + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8) * 2);
#pragma unroll
      for (int np = 0; np < NB / 2; ++np) {
        unsigned bf[4];
        ldmatrix_x4(bf, bBase + ((wn * TN + np * 16 + (mi >> 1) * 8 + r8) * P + kk * 16 +
                                 (mi & 1) * 8) * 2);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          mma16816(acc[mt][2 * np], af[mt], bf[0], bf[1], f16());
          mma16816(acc[mt][2 * np + 1], af[mt], bf[2], bf[3], f16());
        }
      }
    }
  }
  cp_async_wait<0>();
  const int g = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int col = n0 + wn * TN + nb * 8 + 2 * tq;
    if (col >= N) continue;
    const float b0 = to_f32(bias[col]), b1 = to_f32(bias[col + 1]);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm * TM + mt * 16 + g + 8 * h;
        if (row >= M) continue;
        float x0 = acc[mt][nb][2 * h] + b0, x1 = acc[mt][nb][2 * h + 1] + b1;
        if (GELU) {
          x0 = gelu_erf(x0);
          x1 = gelu_erf(x1);
        }
        *reinterpret_cast<unsigned*>(d + (long long)row * N + col) = pack2(x0, x1, f16());
      }
  }
}
}  // namespace bench

extern "C" __global__ void __launch_bounds__(256) bench_gelu(const kiln::f16* __restrict__ x,
                                                             kiln::f16* __restrict__ y,
                                                             long long n) {
  using namespace kiln;
  const long long nv = n / 8;
  for (long long v = global_thread_index(); v < nv; v += global_thread_count()) {
    const Vec<f16, 8> a = load_vec<f16, 8>(x + v * 8);
    Vec<f16, 8> r;
#pragma unroll
    for (int k = 0; k < 8; ++k) r.v[k] = from_f32<f16>(bench::gelu_erf(to_f32(a.v[k])));
    store_vec<f16, 8>(y + v * 8, r);
  }
}
)";

struct Config {
  int bm, bn, bk, wm, wn, stages;
  std::string label() const {
    return fmt::format("bm={} bn={} bk={} warps={}x{} stages={}", bm, bn, bk, wm, wn, stages);
  }
  int threads() const { return 32 * wm * wn; }
  size_t smem() const { return static_cast<size_t>(stages) * (bm + bn) * (bk + 8) * 2; }
};
const Config kConfigs[] = {
    {128, 128, 32, 2, 4, 4}, {128, 128, 64, 2, 4, 3}, {128, 64, 32, 2, 2, 4},
    {64, 128, 32, 2, 2, 4},  {64, 64, 32, 2, 2, 4},   {64, 64, 64, 2, 2, 3},
    {128, 256, 32, 2, 4, 3}, {256, 128, 32, 4, 2, 3},
};

struct Shape {
  const char* name;
  int64_t m, n, k;
};
// BERT-base's FC (768 -> 3072, erf GELU) at batch 1 / 8 / 32 of 128 tokens; the same product at
// a Llama-sized width for scale.
const Shape kShapes[] = {
    {"bert_fc_b1", 128, 3072, 768},
    {"bert_fc_b8", 1024, 3072, 768},
    {"bert_fc_b32", 4096, 3072, 768},
    {"wide_512", 512, 5632, 2048},
};

struct Data {
  int64_t m = 0, n = 0, k = 0, copies = 1;
  void* a = nullptr;
  std::vector<void*> w;
  void* bias = nullptr;
  void* d = nullptr;    // the prototype's output
  void* pre = nullptr;  // cuBLASLt's product (+ bias)
  void* ref = nullptr;  // GELU of it
};

bool alloc_data(const Shape& s, Data* d) {
  d->m = s.m;
  d->n = s.n;
  d->k = s.k;
  const size_t wbytes = static_cast<size_t>(s.n * s.k) * 2;
  d->copies = std::clamp<int64_t>(static_cast<int64_t>((size_t{128} << 20) / wbytes) + 1, 2, 20);
  std::mt19937 rng(static_cast<uint32_t>(s.m * 31 + s.n));
  std::vector<uint16_t> host(static_cast<size_t>(std::max(s.m * s.k, s.n * s.k)));
  auto fill = [&](void** dst, size_t count, int lo, int hi) {
    for (size_t i = 0; i < count; ++i) host[i] = kiln::bench::random_half(rng, lo, hi);
    CHECK_CUDA(cudaMalloc(dst, count * 2));
    CHECK_CUDA(cudaMemcpy(*dst, host.data(), count * 2, cudaMemcpyHostToDevice));
    return true;
  };
  // Activations in [1/4, 2), weights in [1/64, 1/8) (the sums stay in fp16's range).
  if (!fill(&d->a, static_cast<size_t>(s.m * s.k), 13, 15)) return false;
  d->w.resize(static_cast<size_t>(d->copies));
  for (void*& w : d->w)
    if (!fill(&w, static_cast<size_t>(s.n * s.k), 9, 11)) return false;
  if (!fill(&d->bias, static_cast<size_t>(s.n), 12, 14)) return false;
  for (void** p : {&d->d, &d->pre, &d->ref})
    CHECK_CUDA(cudaMalloc(p, static_cast<size_t>(s.m * s.n) * 2));
  return true;
}

void free_data(Data* d) {
  for (void* p : {d->a, d->bias, d->d, d->pre, d->ref}) cudaFree(p);
  for (void* w : d->w) cudaFree(w);
}

bool max_error(const Data& d, double* err) {
  const size_t n = static_cast<size_t>(d.m * d.n);
  std::vector<uint16_t> got(n), want(n);
  CHECK_CUDA(cudaMemcpy(got.data(), d.d, n * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(want.data(), d.ref, n * 2, cudaMemcpyDeviceToHost));
  *err = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = kiln::bench::half_to_float(got[i]), w = kiln::bench::half_to_float(want[i]);
    const double e = std::isfinite(g) ? std::fabs(g - w) / (1.0 + std::fabs(w)) : INFINITY;
    *err = std::max(*err, e);
  }
  return true;
}

void print(const Shape& s, const char* way, const std::string& config, double us, double err) {
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
bool time_cublaslt(cublasLtHandle_t lt, cudaKernel_t gelu, const Shape& s, Data& d) {
  kiln::bench::LtProduct p;
  if (!p.init(kWho, s.m, s.n, s.k, d.bias)) return false;
  const uint64_t ws_bytes = kiln::bench::LtProduct::kWorkspaceBytes;
  cublasLtMatmulHeuristicResult_t results[8] = {};
  int returned = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.w, p.a, p.d, p.d, p.pref, 8, results,
                                          &returned));
  if (returned < 1) {
    std::fprintf(stderr, "%s: no cuBLASLt algorithm for %s\n", kWho, s.name);
    return false;
  }
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  const int64_t n = s.m * s.n;
  const dim3 gelu_grid(static_cast<unsigned>(std::min<int64_t>((n / 8 + 255) / 256, 65535)));
  double best = INFINITY, best_with_gelu = 0;
  int best_i = -1;
  bool ok = true;
  for (int i = 0; ok && i < returned; ++i) {
    auto gemm = [&](int64_t c, cudaStream_t st) {
      const float alpha = 1.0f, beta = 0.0f;
      CHECK_LT(cublasLtMatmul(lt, p.desc, &alpha, d.w[static_cast<size_t>(c % d.copies)], p.w, d.a,
                              p.a, &beta, d.pre, p.d, d.pre, p.d, &results[i].algo, ws, ws_bytes,
                              st));
      return true;
    };
    double ms = 0;
    if (!kiln::bench::time_graph_ms(kLaunches, gemm, kRepeats, &ms)) {
      (void)cudaGetLastError();
      continue;  // an algorithm that does not run here
    }
    if (ms < best) {
      best = ms;
      best_i = i;
    }
  }
  if (best_i < 0) return false;
  auto gemm_gelu = [&](int64_t c, cudaStream_t st) {
    const float alpha = 1.0f, beta = 0.0f;
    CHECK_LT(cublasLtMatmul(lt, p.desc, &alpha, d.w[static_cast<size_t>(c % d.copies)], p.w, d.a,
                            p.a, &beta, d.pre, p.d, d.pre, p.d, &results[best_i].algo, ws, ws_bytes,
                            st));
    void* x = d.pre;
    void* y = d.ref;
    long long count = n;
    void* args[] = {&x, &y, &count};
    CHECK_CUDA(
        cudaLaunchKernel(reinterpret_cast<const void*>(gelu), gelu_grid, dim3(256), args, 0, st));
    return true;
  };
  ok = kiln::bench::time_graph_ms(kLaunches, gemm_gelu, kRepeats, &best_with_gelu);
  // The reference: the first copy's product, then its GELU.
  ok = ok && gemm_gelu(0, nullptr);
  CHECK_CUDA(cudaDeviceSynchronize());
  if (ok) {
    print(s, "cublaslt", fmt::format("heuristic #{} of {}", best_i, returned),
          best * 1e3 / kLaunches, 0);
    print(s, "cublaslt+gelu", fmt::format("heuristic #{} of {}", best_i, returned),
          best_with_gelu * 1e3 / kLaunches, 0);
  }
  cudaFree(ws);
  return ok;
}

bool time_tiled(cudaLibrary_t lib, int index, const Config& c, const Shape& s, Data& d,
                bool* within) {
  cudaKernel_t kernel = nullptr;
  CHECK_CUDA(cudaLibraryGetKernel(&kernel, lib, fmt::format("bench_tiled_{}", index).c_str()));
  const auto fn = reinterpret_cast<const void*>(kernel);
  CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(c.smem())));
  const int64_t blocks = ((s.m + c.bm - 1) / c.bm) * ((s.n + c.bn - 1) / c.bn);
  auto launch = [&](int64_t i, cudaStream_t st) {
    void* a = d.a;
    void* w = d.w[static_cast<size_t>(i % d.copies)];
    void* bias = d.bias;
    void* out = d.d;
    int m = static_cast<int>(s.m), n = static_cast<int>(s.n), k = static_cast<int>(s.k);
    void* args[] = {&a, &w, &bias, &out, &m, &n, &k};
    CHECK_CUDA(cudaLaunchKernel(fn, dim3(static_cast<unsigned>(blocks)),
                                dim3(static_cast<unsigned>(c.threads())), args, c.smem(), st));
    return true;
  };
  CHECK_CUDA(cudaMemset(d.d, 0xFF, static_cast<size_t>(s.m * s.n) * 2));
  if (!launch(0, nullptr)) return false;
  CHECK_CUDA(cudaDeviceSynchronize());
  double err = 0, ms = 0;
  if (!max_error(d, &err) || !kiln::bench::time_graph_ms(kLaunches, launch, kRepeats, &ms))
    return false;
  *within = err < 2e-2;
  print(s, "tiled+gelu", c.label(), ms * 1e3 / kLaunches, err);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  // --compile-only: NVRTC-compile the module for sm_90 and stop (no GPU needed).
  const bool compile_only = argc > 1 && std::strcmp(argv[1], "--compile-only") == 0;
  cudaDeviceProp prop{};
  const std::string arch = compile_only ? "sm_90" : kiln::bench::device_arch(kWho, &prop);
  if (arch.empty()) return 1;
  std::vector<Shape> shapes;
  for (int i = 1; i < argc; ++i)
    for (const Shape& s : kShapes)
      if (std::strcmp(argv[i], s.name) == 0) shapes.push_back(s);
  if (shapes.empty()) shapes.assign(std::begin(kShapes), std::end(kShapes));

  std::string source = kSource;
  for (size_t i = 0; i < std::size(kConfigs); ++i) {
    const Config& c = kConfigs[i];
    source += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({0}) bench_tiled_{1}(const unsigned "
        "short* a, const unsigned short* w, const kiln::f16* bias, kiln::f16* d, int M, int N, "
        "int K) {{\n  bench::tiled_gemm<{2}, {3}, {4}, {5}, {6}, {7}, true>(a, w, bias, d, M, N, "
        "K);\n}}\n",
        c.threads(), i, c.bm, c.bn, c.bk, c.wm, c.wn, c.stages);
  }
  if (const char* dump = std::getenv("KILN_BENCH_SOURCE")) std::ofstream(dump) << source;
  auto cubin = compiler::nvrtc_compile({kWho, source, compiler::kernel_headers()}, arch);
  if (!cubin.ok()) {
    std::fprintf(stderr, "%s: %s\n", kWho, cubin.status().to_string().c_str());
    return 1;
  }
  if (compile_only) return 0;
  cudaLibrary_t lib = nullptr;
  if (!kiln::bench::cuda_ok(
          kWho, cudaLibraryLoadData(&lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
          "cudaLibraryLoadData"))
    return 1;
  cudaKernel_t gelu = nullptr;
  if (!kiln::bench::cuda_ok(kWho, cudaLibraryGetKernel(&gelu, lib, "bench_gelu"), "bench_gelu"))
    return 1;
  cublasLtHandle_t lt = nullptr;
  if (cublasLtCreate(&lt) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cublasLtCreate failed\n", kWho);
    return 1;
  }
  bool ok = true, all_within = true;
  for (const Shape& s : shapes) {
    Data d;
    if (!alloc_data(s, &d) || !time_cublaslt(lt, gelu, s, d)) {
      ok = false;
      free_data(&d);
      continue;
    }
    for (size_t i = 0; i < std::size(kConfigs); ++i) {
      bool within = false;
      ok = time_tiled(lib, static_cast<int>(i), kConfigs[i], s, d, &within) && ok;
      all_within = all_within && within;
    }
    free_data(&d);
  }
  cublasLtDestroy(lt);
  cudaLibraryUnload(lib);
  if (!all_within) std::fprintf(stderr, "%s: a prototype output is off the reference\n", kWho);
  return ok && all_within ? 0 : 1;
}
