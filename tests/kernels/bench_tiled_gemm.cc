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

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "tests/kernels/bench_common.h"
#include "tests/kernels/bench_gemm_common.h"

namespace {

namespace gemm = kiln::bench::gemm;
constexpr const char* kWho = "bench_tiled_gemm";

#define CHECK_CUDA(call) \
  if (!kiln::bench::cuda_ok(kWho, (call), #call)) return false

// The prototype, for NVRTC after gemm::kGeluSource (kiln's headers supply cp.async, ldmatrix,
// mma).
constexpr const char* kSource = R"(
#include "attention.cuh"
namespace bench {
using namespace kiln;

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
          x0 = op_gelu(x0);
          x1 = op_gelu(x1);
        }
        *reinterpret_cast<unsigned*>(d + (long long)row * N + col) = pack2(x0, x1, f16());
      }
  }
}
}  // namespace bench
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

bool time_tiled(cudaLibrary_t lib, int index, const Config& c, const gemm::Shape& s, gemm::Data& d,
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
  gemm::Timed t;
  const bool ran = gemm::check_and_time(kWho, s, d, "tiled+gelu", c.label(), launch, &t);
  *within = t.within;
  return ran;
}

}  // namespace

int main(int argc, char** argv) {
  // --compile-only: NVRTC-compile the module for sm_90 and stop (no GPU needed).
  const bool compile_only = argc > 1 && std::strcmp(argv[1], "--compile-only") == 0;
  cudaDeviceProp prop{};
  const std::string arch = compile_only ? "sm_90" : kiln::bench::device_arch(kWho, &prop);
  if (arch.empty()) return 1;
  const std::vector<gemm::Shape> shapes = gemm::shapes_from_args(argc, argv);

  std::string source = std::string(gemm::kGeluSource) + kSource;
  for (size_t i = 0; i < std::size(kConfigs); ++i) {
    const Config& c = kConfigs[i];
    source += fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({0}) bench_tiled_{1}(const unsigned "
        "short* a, const unsigned short* w, const kiln::f16* bias, kiln::f16* d, int M, int N, "
        "int K) {{\n  bench::tiled_gemm<{2}, {3}, {4}, {5}, {6}, {7}, true>(a, w, bias, d, M, N, "
        "K);\n}}\n",
        c.threads(), i, c.bm, c.bn, c.bk, c.wm, c.wn, c.stages);
  }
  std::vector<uint8_t> cubin;
  if (!gemm::compile_module(kWho, source, arch, &cubin)) return 1;
  if (compile_only) return 0;
  cudaLibrary_t lib = nullptr;
  cudaKernel_t gelu = nullptr;
  if (!gemm::load_library(kWho, cubin, &lib, &gelu)) return 1;
  auto ways = [&](const gemm::Shape& s, gemm::Data& d, bool* all_within) {
    bool ok = true;
    for (size_t i = 0; i < std::size(kConfigs); ++i) {
      bool within = false;
      ok = time_tiled(lib, static_cast<int>(i), kConfigs[i], s, d, &within) && ok;
      *all_within = *all_within && within;
    }
    return ok;
  };
  const bool ok = gemm::for_each_shape(kWho, shapes, gelu, ways);
  cudaLibraryUnload(lib);
  return ok ? 0 : 1;
}
