// Prototype measurement (not a test, not used by the compiler; needs an sm_90 GPU): can a
// Hopper-native GEMM of kiln's own, with the bias and the exact (erf) GELU in its epilogue,
// match cuBLASLt plus the separate GELU kernel at BERT / Llama prefill sizes? The Ampere-style
// prototype (bench_tiled_gemm.cc, mma.sync) ran 2-3x slower than cuBLASLt alone: cuBLASLt's
// Hopper kernels use wgmma and TMA, which mma.sync and cp.async cannot reach.
//
// The prototype below (sm_90a) is the known Hopper recipe, written from the PTX ISA: CTA tiles of
// BM x BN over K steps of 64 halves (128 bytes: one 128B-swizzled TMA box row), STAGES
// shared-memory stages filled by TMA (cp.async.bulk.tensor) with a full and an empty mbarrier
// each; warp specialisation: warpgroup 0 is the producer (one thread issues the TMA loads; it
// gives its registers to the consumers with setmaxnreg), warpgroups 1.. are the CONSUMERS, each
// 64 rows x BN with wgmma.mma_async m64nBNk16 from shared-memory descriptors (both operands
// K-major), the next stage's wgmmas issued before waiting on the previous ones. The epilogue adds
// the bias, applies the erf GELU, and stores fp16 with 16-byte stores (a 4x4 transpose of the
// accumulator fragments within each quad of lanes). D [M, N] = gelu(A [M, K] · W [N, K]^T + bias).
// The GELU comes two ways: through CUDA's erff (two code paths by |x|, so divergent warps run
// both), or through erfc_cheb, a branch-free fit of erfc (the GELU within 2.6e-6 relative): the
// epilogue (128 GELUs a consumer thread per 128 x 256 tile) does not overlap the wgmmas.
// Configurations (kConfigs): BM = 128 (2 consumers) x BN = 256 / 192 / 128 / 64 and BM = 64 (1
// consumer) x BN = 256 / 64, 4 to 8 stages; BN = 192 fills 132 multiprocessors at 1024 x 3072
// (128 tiles) and 512 x 5632 (120). Ping-pong ones (2 consumers, BN = 192 / 256): each consumer
// takes every other 64 x BN tile on its own, their mainloops taking turns, so that one's epilogue
// overlaps the other's wgmmas. Each runs with one CTA a tile (ping-pong: a pair of tiles) and,
// where those outnumber the multiprocessors, persistent (one CTA a multiprocessor taking every
// 132nd; the producer then fills the next tile's stages during the consumers' epilogue). Ways:
// "wgmma+gelu" (bias + erff GELU epilogue; every configuration above), "wgmma+gelu_fast" (bias +
// erfc_cheb GELU; the three that won with erff's: 2 consumers x BN = 256 / 192, 4 stages, and 1
// consumer x BN = 64, 8 stages), and the diagnostic "wgmma", the same kernel with the bias
// epilogue only (2 x 256 x 4, 2 x 192 x 5, 1 x 64 x 8), timed against cuBLASLt alone: whether a
// gap is the mainloop's or the epilogue's. Against them, in the same process: cuBLASLt with its
// bias epilogue, alone and followed by the erf-GELU kernel (tests/kernels/bench_gemm_common.h).
//
//   build/tests/kernels/kernels_bench_wgmma_gemm [SHAPE...]   (default: every shape)
//   build/tests/kernels/kernels_bench_wgmma_gemm --check-only   (the small checks below only)
//   build/tests/kernels/kernels_bench_wgmma_gemm --compile-only   (NVRTC for sm_90a; no GPU)
//   KILN_BENCH_SOURCE=FILE: the module's source written to FILE (for nvcc -Xptxas -v).
//
// Before timing, every configuration runs on small shapes (one K step; four; and edges in M, N
// and K with the ring wrapping several times), with one CTA a tile and with 2 CTAs taking every
// other tile, checked element by element against a CPU reference: a failure names the first
// wrong (row, col, got, want) on stderr (bias-only configurations against the reference without
// the GELU; both GELU flavours against the one in double). A wait on an mbarrier that lasts over ~2
// s gives up and records where (block, thread, barrier, step), reported as a hang instead of a
// stuck GPU. Then, as bench_tiled_gemm: each way one CUDA graph of 20 GEMMs rotating through at
// least 128 MB of weight copies, the median of 15 replays, the output checked against cuBLASLt +
// GELU (way "wgmma": cuBLASLt alone; "wgmma+gelu_fast" against the same cuBLASLt + erff GELU); one
// JSON line per (shape, way) with {"shape", "m", "n", "k", "way", "config", "us", "tflops",
// "max_err"}, every configuration's and then each way's best (ways "wgmma+gelu best",
// "wgmma+gelu_fast best", "wgmma best"). Exits non-zero when a check fails or a CUDA call does.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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
constexpr const char* kWho = "bench_wgmma_gemm";

// The prototype, for NVRTC after gemm::kGeluSource and the wgmma wrappers (wgmma_source).
constexpr const char* kSource = R"(
#include "attention.cuh"

namespace bench {
using namespace kiln;

// A CUtensorMap's 128 opaque bytes (the host encodes it; passed as a __grid_constant__).
struct alignas(64) TmaDesc {
  unsigned long long v[16];
};

// ---- mbarriers ----------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the other threads and to the async proxy (TMA).
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// This thread's arrival, and `bytes` more expected transaction bytes for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// Whether the phase of parity `parity` has completed (acquire: what the phase's arrivals and
// transactions wrote is then visible).
__device__ __forceinline__ bool mbar_try_wait(unsigned bar, unsigned parity) {
  unsigned done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
// Waits for the phase of parity `parity`. A watchdog: after ~2 s (or at once when another wait
// already gave up) it stops waiting and records where in hang ([0] 1, [1] block, [2] thread, [3]
// `what`: role << 28 | stage << 20 | parity << 16 | step; role 3, the ping-pong turn: consumer
// << 20 | parity << 16 | tile), so a pipeline bug shows as a
// reported hang, not a stuck GPU.
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity, unsigned what,
                                          unsigned long long* hang) {
  if (mbar_try_wait(bar, parity)) return;
  const long long t0 = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (*reinterpret_cast<volatile unsigned long long*>(hang) != 0) return;
    if (clock64() - t0 > 4000000000LL) {
      if (atomicCAS(hang, 0ull, 1ull) == 0ull) {
        hang[1] = blockIdx.x;
        hang[2] = threadIdx.x;
        hang[3] = what;
        __threadfence();
      }
      return;
    }
  }
}

// ---- TMA ----------------------------------------------------------------------------------------
// The box at (c0 = K element, c1 = row) of `map` into shared memory at dst; its bytes complete as
// transactions on `bar` (all of the box's: elements out of range arrive as zeros).
__device__ __forceinline__ void tma_load_2d(unsigned dst, const TmaDesc& map, int c0, int c1,
                                            unsigned bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<unsigned long long>(&map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const TmaDesc& map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&map))
               : "memory");
}

// ---- wgmma --------------------------------------------------------------------------------------
// The shared-memory matrix descriptor of a K-major operand tile at `addr` as TMA's SWIZZLE_128B
// wrote it: rows of 128 bytes (64 halves), the 16-byte chunks of row r XOR-ed with r % 8, so 8
// rows (1024 bytes, the tile 1024-aligned) form one swizzle atom. Bits 0-13: address >> 4;
// 16-29: leading byte offset >> 4 (unused for swizzled K-major: 1); 32-45: stride byte offset
// >> 4, from one 8-row group to the next (1024 >> 4); 49-51: base offset 0 (atoms
// 1024-aligned); 62-63: swizzle mode 1 = 128B. The k-th 16-element K slice of the tile is
// addr + 32 k: the hardware applies the XOR to the address it forms, as TMA did.
__device__ __forceinline__ unsigned long long smem_desc(unsigned addr) {
  return static_cast<unsigned long long>((addr & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) |
         (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across the wgmma
// fences and waits (the asynchronous wgmma writes them without the compiler knowing when).
template <int R>
__device__ __forceinline__ void fence_registers(float (&acc)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(acc[i])::"memory");
}

template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// Lanes 4g..4g+3 hold a 4x4 matrix of words, v[i] in lane 4g + q being element (q, i); after
// this, lane 4g + q holds element (i, q) in v[i]. Two rounds, each swapping one bit of the lane
// index with the same bit of the word index (the words whose bits differ cross to the partner).
__device__ __forceinline__ void quad_transpose(unsigned (&v)[4], int q) {
  const bool odd = q & 1, high = q & 2;
  unsigned s0 = odd ? v[0] : v[1], s1 = odd ? v[2] : v[3];
  s0 = __shfl_xor_sync(0xffffffffu, s0, 1);
  s1 = __shfl_xor_sync(0xffffffffu, s1, 1);
  v[0] = odd ? s0 : v[0];
  v[1] = odd ? v[1] : s0;
  v[2] = odd ? s1 : v[2];
  v[3] = odd ? v[3] : s1;
  unsigned t0 = high ? v[0] : v[2], t1 = high ? v[1] : v[3];
  t0 = __shfl_xor_sync(0xffffffffu, t0, 2);
  t1 = __shfl_xor_sync(0xffffffffu, t1, 2);
  v[0] = high ? t0 : v[0];
  v[1] = high ? t1 : v[1];
  v[2] = high ? v[2] : t0;
  v[3] = high ? v[3] : t1;
}

// ---- the fast GELU ------------------------------------------------------------------------------
// erfc(z) for z >= 0, branch-free: t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), P the degree-9
// Chebyshev fit of Press et al. (Numerical Recipes, erfcc; fractional error below 1.2e-7 for
// every z), with the approximate reciprocal and ex2 (2 MUFU operations, 11 FMAs). Abramowitz &
// Stegun 7.1.26 (erf to 1.5e-7 absolute, 5 FMAs) was the first choice, but its error is absolute:
// in the GELU's negative tail its relative error reaches 6.1e-4 at x = -4.18 (|gelu| = 6.5e-5, in
// fp16's normal range), over fp16's half-ulp (2.4e-4); this fit's stays at 2.6e-6.
__device__ __forceinline__ float erfc_cheb(float z) {
  const float t = __fdividef(1.0f, fmaf(0.5f, z, 1.0f));
  float p = fmaf(t, 0.17087277f, -0.82215223f);
  p = fmaf(t, p, 1.48851587f);
  p = fmaf(t, p, -1.13520398f);
  p = fmaf(t, p, 0.27886807f);
  p = fmaf(t, p, -0.18628806f);
  p = fmaf(t, p, 0.09678418f);
  p = fmaf(t, p, 0.37409196f);
  p = fmaf(t, p, 1.00002368f);
  p = fmaf(t, p, -1.26551223f);
  return t * fast_exp2(fmaf(-z, z, p) * 1.44269504088896341f);
}
// x/2 (1 + erf(x / sqrt 2)) through erfc_cheb: 1 + erf(-z) = erfc(z) and 1 + erf(z) = 2 - erfc(z)
// for z >= 0, a select rather than 1 + erf's cancellation for negative x (erff's GELU loses its
// relative accuracy there: 1e-3 at x = -4.18). Measured on the CPU against the GELU in double over
// x in [-10, 10] at 1e-4 steps, the reciprocal and ex2 modelled as exact values off by up to
// 2^-22 relative: at most 3.8e-7 absolute (1.6e-7 as |err| / (1 + |gelu|), the output check's
// measure; erff's GELU: 4.5e-7 and 8.3e-8) and 2.6e-6 relative where |gelu| >= 2^-14 (erff's:
// 1.0e-3). Infinities as erff's GELU (+inf: +inf; -inf: NaN).
__device__ __forceinline__ float gelu_erf_fast(float x) {
  const float h = 0.5f * erfc_cheb(fabsf(x) * 0.70710678118654752f);
  return x * (x < 0.0f ? h : 1.0f - h);
}

// The epilogue's activation ACT: kActBias (none: bias only), kActGelu (GELU through erff: its two
// paths by |x| make the warps run both), kActGeluFast (GELU through erfc_cheb).
constexpr int kActBias = 0, kActGelu = 1, kActGeluFast = 2;
template <int ACT>
__device__ __forceinline__ float activation(float x) {
  return ACT == kActGelu ? op_gelu(x) : ACT == kActGeluFast ? gelu_erf_fast(x) : x;
}

// The epilogue of one warpgroup's 64 x BN accumulators, rows m0.., columns n0.. of D (+ bias,
// then the activation ACT):
// acc[4 j + 2 h + e] is row 16 warp + lane / 4 + 8 h, column 8 j + 2 (lane % 4) + e. Per 32
// columns (4 n8 blocks) and row, the quad's 4x4 words are transposed so that lane q holds the 8
// columns of block q, stored as 16 bytes.
template <int BN, int ACT>
__device__ __forceinline__ void store_tile(const float (&acc)[BN / 2],
                                           const f16* __restrict__ bias, f16* __restrict__ d,
                                           int m0, int n0, int M, int N) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, q = lane % 4;
  const int row0 = m0 + 16 * warp + lane / 4;
#pragma unroll
  for (int j0 = 0; j0 < BN / 8; j0 += 4) {
    float b[4][2];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + 8 * (j0 + j) + 2 * q;  // N % 8 == 0: col + 1 < N with col
      b[j][0] = col < N ? to_f32(bias[col]) : 0.0f;
      b[j][1] = col < N ? to_f32(bias[col + 1]) : 0.0f;
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      unsigned v[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * (j0 + j) + 2 * h;
        const float x0 = acc[i] + b[j][0], x1 = acc[i + 1] + b[j][1];
        v[j] = pack2(activation<ACT>(x0), activation<ACT>(x1), f16());
      }
      quad_transpose(v, q);
      const int row = row0 + 8 * h, col = n0 + 8 * (j0 + q);
      if (row < M && col < N)
        *reinterpret_cast<uint4*>(d + static_cast<long long>(row) * N + col) =
            make_uint4(v[0], v[1], v[2], v[3]);
    }
  }
}

// The CTA takes tiles blockIdx.x, + gridDim.x, ... (row-major over the BM x BN tiles of D; a grid
// of one CTA a tile, or persistent: fewer CTAs, the producer then filling the next tile's stages
// while the consumers run the epilogue). Shared memory: STAGES stages of [A: BM rows x 128 B][W:
// BN rows x 128 B] (each 1024-aligned), then the STAGES full and STAGES empty mbarriers. The ring
// runs on across tiles: step `it` (counted over all this CTA's tiles) uses stage it % STAGES in
// its round it / STAGES. Block: 128 (CONSUMERS + 1) threads, BM = 64 CONSUMERS. ACT: the
// epilogue's activation (kActBias: bias only, the diagnostic way against cuBLASLt alone).
//
// PINGPONG (2 consumers): tiles of 64 x BN, consumer c taking the CTA's tiles j = c, c + 2, ... on
// its own (stage it = j KT + kt), so that one's epilogue runs while the other's wgmmas do. Their
// mainloops take turns through the two turn mbarriers (one arrival each): consumer c starts its
// n-th tile's mainloop once the other has waited on every full barrier of the tile before
// (consumer 0: turn[0]'s phase n - 1; consumer 1: turn[1]'s phase n). Without that, consumer 1
// could wait on a stage's round r while round r - 1 (consumer 0's) is not loaded yet, and the
// parity of round r would read as complete.
template <int CONSUMERS, int BN, int STAGES, int ACT, bool PINGPONG>
__device__ __forceinline__ void wgmma_gemm(const TmaDesc& tma_a, const TmaDesc& tma_w,
                                           const f16* __restrict__ bias, f16* __restrict__ d,
                                           int M, int N, int K, unsigned long long* hang) {
  static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong: two consumers taking turns");
  constexpr int BM = PINGPONG ? 64 : 64 * CONSUMERS;
  constexpr int kReaders = PINGPONG ? 1 : CONSUMERS;  // the consumers that read each stage
  constexpr unsigned kBytesA = BM * 128, kBytesW = BN * 128, kStage = kBytesA + kBytesW;
  static_assert(BN % 32 == 0 && BN >= 32 && BN <= 256, "wgmma n and the epilogue's 32-col groups");
  extern __shared__ __align__(1024) unsigned char smem[];
  // Swizzle atoms need 1024-byte alignment; the launch asks for 1 KB more than the stages use.
  const unsigned base = (smem_addr(smem) + 1023u) & ~1023u;
  const unsigned full = base + STAGES * kStage, empty = full + STAGES * 8,
                 turn = empty + STAGES * 8;
  const int wg = threadIdx.x / 128;
  const int n_tiles = (N + BN - 1) / BN, tiles = ((M + BM - 1) / BM) * n_tiles;
  const int KT = (K + 63) / 64;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(full + 8 * s, 1);               // the producer's arrive.expect_tx
      mbar_init(empty + 8 * s, 4 * kReaders);  // one arrival per reading consumer warp
    }
    if (PINGPONG) {
      mbar_init(turn, 1);
      mbar_init(turn + 8, 1);
    }
    mbar_init_fence();
  }
  __syncthreads();

  if (wg == 0) {  // producer
    if (CONSUMERS > 1) setmaxnreg_dec<40>();
    if (threadIdx.x != 0) return;
    tma_prefetch_map(tma_a);
    tma_prefetch_map(tma_w);
    unsigned it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      const int m0 = (t / n_tiles) * BM, n0 = (t % n_tiles) * BN;
      for (int kt = 0; kt < KT; ++kt, ++it) {
        const unsigned s = it % STAGES;
        // Round r of stage s waits for the consumers' release of round r - 1: the phase of
        // parity (r - 1) & 1. Round 0 waits on parity 1, the phase before a fresh barrier's
        // first, which counts as complete.
        const unsigned parity = ((it / STAGES) & 1) ^ 1;
        mbar_wait(empty + 8 * s, parity, (1u << 28) | (s << 20) | (parity << 16) | (it & 0xffff),
                  hang);
        mbar_arrive_expect_tx(full + 8 * s, kStage);
        const unsigned dst = base + s * kStage;
        tma_load_2d(dst, tma_a, kt * 64, m0, full + 8 * s);
        tma_load_2d(dst + kBytesA, tma_w, kt * 64, n0, full + 8 * s);
      }
    }
    return;
  }

  // consumers: warpgroup c = wg - 1 computes rows m0 + 64 c .. + 63 of each tile (PINGPONG: all
  // 64 rows of every other tile)
  if (CONSUMERS > 1) setmaxnreg_inc<232>();
  const int c = wg - 1, lane = threadIdx.x % 32;
  constexpr int kEvery = PINGPONG ? 2 : 1;
  const int j0 = PINGPONG ? c : 0;
  for (int j = j0, t = blockIdx.x + j0 * gridDim.x; t < tiles;
       j += kEvery, t += kEvery * gridDim.x) {
    unsigned it = j * KT;  // the CTA's tiles before this one took KT steps each
    if (PINGPONG && (c == 1 || j > 0)) {
      const unsigned n = j / 2, parity = (c == 1 ? n : n - 1) & 1;
      mbar_wait(turn + 8 * c, parity, (3u << 28) | (c << 20) | (parity << 16) | (j & 0xffff),
                hang);
    }
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
    fence_registers(acc);
    for (int kt = 0; kt < KT; ++kt, ++it) {
      const unsigned s = it % STAGES, parity = (it / STAGES) & 1;
      mbar_wait(full + 8 * s, parity, (2u << 28) | (s << 20) | (parity << 16) | (it & 0xffff),
                hang);
      const unsigned a = base + s * kStage + (PINGPONG ? 0 : c * 64 * 128),
                     w = base + s * kStage + kBytesA;
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma(acc, smem_desc(a + 32 * kk), smem_desc(w + 32 * kk));
      wgmma_commit();
      // Step it - 1's wgmmas are done (it's may still run): its stage goes back to the producer.
      wgmma_wait<1>();
      fence_registers(acc);
      if (kt > 0 && lane == 0) mbar_arrive(empty + 8 * ((it - 1) % STAGES));
    }
    // Every full wait of this tile passed: the other consumer's turn.
    if (PINGPONG && threadIdx.x % 128 == 0) mbar_arrive(turn + 8 * (1 - c));
    wgmma_wait<0>();
    fence_registers(acc);
    // The tile's last stage goes back too (the producer may be waiting for it for the next tile).
    if (lane == 0) mbar_arrive(empty + 8 * ((it - 1) % STAGES));
    store_tile<BN, ACT>(acc, bias, d, (t / n_tiles) * BM + (PINGPONG ? 0 : 64 * c),
                         (t % n_tiles) * BN, M, N);
  }
}
}  // namespace bench
)";

#define CHECK_CUDA(call) \
  if (!kiln::bench::cuda_ok(kWho, (call), #call)) return false

// wgmma(acc, desc_a, desc_b) for m64nNk16 (fp32 += fp16 · fp16, both operands K-major from
// shared memory): acc += A · B. The N / 2 accumulator registers are spelled out, so the
// wrapper is written here rather than by hand.
std::string wgmma_source(int n) {
  const int regs = n / 2;
  std::string list, operands;
  for (int i = 0; i < regs; ++i) {
    list += fmt::format("{}%{}", i ? ", " : "", i);
    operands += fmt::format("{}\"+f\"(d[{}])", i ? ", " : "", i);
  }
  // scale-d = 1 (D += A·B; the caller zeroes D), imm-scale-a = imm-scale-b = 1, imm-trans-a =
  // imm-trans-b = 0 (K-major).
  return fmt::format(
      "namespace bench {{\n__device__ __forceinline__ void wgmma(float (&d)[{0}], unsigned long "
      "long a, unsigned long long b) {{\n  asm volatile(\"{{\\n.reg .pred p;\\nsetp.ne.b32 p, "
      "%{2}, 0;\\nwgmma.mma_async.sync.aligned.m64n{1}k16.f32.f16.f16 {{{3}}}, %{0}, %{4}, p, "
      "1, 1, 0, 0;\\n}}\\n\"\n    : {5}\n    : \"l\"(a), \"l\"(b), \"r\"(1));\n}}\n}}  // "
      "namespace bench\n",
      regs, n, regs + 2, list, regs + 1, operands);
}

// The epilogue's activation (the kernel's ACT) and its way's name.
enum Act : int { kBias = 0, kGelu = 1, kGeluFast = 2 };
constexpr const char* kWays[] = {"wgmma", "wgmma+gelu", "wgmma+gelu_fast"};

struct Config {
  int consumers, bn, stages;
  Act act = kGelu;        // kBias: the diagnostic way "wgmma", against cuBLASLt alone
  bool pingpong = false;  // 2 consumers, each on its own 64 x BN tile, taking turns
  const char* way() const { return kWays[act]; }
  int bm() const { return pingpong ? 64 : 64 * consumers; }
  int tiles_at_once() const { return pingpong ? 2 : 1; }
  int threads() const { return 128 * (consumers + 1); }
  // The stages, 1 KB to align them to 1024 bytes, the 2 STAGES mbarriers and the 2 turn ones.
  size_t smem() const {
    return static_cast<size_t>(stages) * (bm() + bn) * 128 + 1024 + 16 * stages + 16;
  }
  std::string label() const {
    return fmt::format("bm={} bn={} bk=64 consumers={}{} stages={}", bm(), bn, consumers,
                       pingpong ? " pingpong" : "", stages);
  }
  // Its kernel, bench_wgmma_<index>.
  std::string entry(size_t index) const {
    return fmt::format(
        "extern \"C\" __global__ void __launch_bounds__({}, 1) bench_wgmma_{}(const "
        "__grid_constant__ bench::TmaDesc a, const __grid_constant__ bench::TmaDesc w, const "
        "kiln::f16* bias, kiln::f16* d, int M, int N, int K, unsigned long long* hang) {{\n  "
        "bench::wgmma_gemm<{}, {}, {}, {}, {}>(a, w, bias, d, M, N, K, hang);\n}}\n",
        threads(), index, consumers, bn, stages, static_cast<int>(act), pingpong);
  }
};
// Up to 227 KB of shared memory a block. Two consumers of 128 x 256 is the large-M tile; 128 x
// 192 fills the 132 multiprocessors better (1024 x 3072: 128 tiles, not 96; 512 x 5632: 120, not
// 88); the smaller ones give M = 128 more CTAs than 3072 / 256 = 12. Two ping-pong ones (64 x BN
// tiles, a pair at once: 1024 x 3072 at BN = 192 is 128 pairs). Then the fast GELU in the three
// that won with erff's (4096 rows; 1024 rows and 512 x 5632; 128 rows), and the bias-only
// diagnostic of the large tiles and of the M = 128 one.
const Config kConfigs[] = {
    {2, 256, 4},
    {2, 192, 4},
    {2, 192, 5},
    {2, 128, 4},
    {1, 256, 4},
    {2, 64, 6},
    {1, 64, 8},
    {2, 192, 6, kGelu, true},
    {2, 256, 5, kGelu, true},
    {2, 256, 4, kGeluFast},
    {2, 192, 4, kGeluFast},
    {1, 64, 8, kGeluFast},
    {2, 256, 4, kBias},
    {2, 192, 5, kBias},
    {1, 64, 8, kBias},
};

// The module: the GELU kernel, the wgmma wrappers, the prototype, and each configuration's entry.
std::string module_source() {
  std::string source = gemm::kGeluSource;
  for (int n : {64, 128, 192, 256}) source += wgmma_source(n);
  source += kSource;
  for (size_t i = 0; i < std::size(kConfigs); ++i) source += kConfigs[i].entry(i);
  return source;
}

// The driver's cuTensorMapEncodeTiled, through the runtime (nothing links libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (!kiln::bench::cuda_ok(kWho,
                            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                             cudaEnableDefault, &found),
                            "cudaGetDriverEntryPointByVersion") ||
      found != cudaDriverEntryPointSuccess) {
    std::fprintf(stderr, "%s: no cuTensorMapEncodeTiled in the driver\n", kWho);
    return nullptr;
  }
  return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
}

// The map of a row-major [rows, k] fp16 matrix read in boxes of box_rows x 64, swizzled 128B (as
// smem_desc expects); elements past the matrix read as zeros.
bool encode_map(PFN_cuTensorMapEncodeTiled_v12000 encode, CUtensorMap* map, void* base,
                int64_t rows, int64_t k, int box_rows) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, base, dims, strides, box, element_strides,
             CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
             CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "%s: cuTensorMapEncodeTiled (%lld x %lld, box %d) failed: %d\n", kWho,
                 static_cast<long long>(rows), static_cast<long long>(k), box_rows,
                 static_cast<int>(r));
    return false;
  }
  return true;
}

// The compiled module, the tensor-map encoder, and the 4 words on the device where a wait that
// gave up says so (mbar_wait).
struct Module {
  cudaLibrary_t lib = nullptr;
  PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  unsigned long long* hang = nullptr;
  int sms = 0;  // the GPU's multiprocessors: a persistent grid's CTAs
};

// One configuration's kernel, ready to launch on one shape's data.
struct Prototype {
  const void* fn = nullptr;
  Config config{};
  CUtensorMap map_a{};
  std::vector<CUtensorMap> map_w;  // one per weight copy
  unsigned long long* hang = nullptr;

  bool init(const Module& mod, int index, const Config& c, const gemm::Data& d) {
    config = c;
    hang = mod.hang;
    if (d.n % 8 != 0 || d.k % 8 != 0) {  // 16-byte stores of D; TMA's 16-byte row strides
      std::fprintf(stderr, "%s: N and K must be multiples of 8\n", kWho);
      return false;
    }
    cudaKernel_t kernel = nullptr;
    CHECK_CUDA(
        cudaLibraryGetKernel(&kernel, mod.lib, fmt::format("bench_wgmma_{}", index).c_str()));
    fn = reinterpret_cast<const void*>(kernel);
    CHECK_CUDA(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(c.smem())));
    if (!encode_map(mod.encode, &map_a, d.a, d.m, d.k, c.bm())) return false;
    map_w.resize(d.w.size());
    for (size_t i = 0; i < d.w.size(); ++i)
      if (!encode_map(mod.encode, &map_w[i], d.w[i], d.n, d.k, c.bn)) return false;
    return true;
  }

  // The CTAs that take every tile at once: one a BM x BN tile of the output (ping-pong: one a
  // pair of tiles).
  int64_t tiles(const gemm::Data& d) const {
    const int64_t n = ((d.m + config.bm() - 1) / config.bm()) * ((d.n + config.bn - 1) / config.bn);
    return (n + config.tiles_at_once() - 1) / config.tiles_at_once();
  }

  // One CTA a tile (pair), then (when fewer) `most` CTAs, each taking every most-th tile (pair).
  std::vector<int64_t> grids(const gemm::Data& d, int64_t most) const {
    if (most < tiles(d)) return {tiles(d), most};
    return {tiles(d)};
  }

  // Weight copy i % copies on `blocks` CTAs (each takes every blocks-th tile).
  bool launch(const gemm::Data& d, int64_t blocks, int64_t i, cudaStream_t st) {
    void* bias = d.bias;
    void* out = d.d;
    int m = static_cast<int>(d.m), n = static_cast<int>(d.n), k = static_cast<int>(d.k);
    void* args[] = {&map_a, &map_w[static_cast<size_t>(i % d.copies)], &bias, &out, &m, &n, &k,
                    &hang};
    CHECK_CUDA(cudaLaunchKernel(fn, dim3(static_cast<unsigned>(blocks)),
                                dim3(static_cast<unsigned>(config.threads())), args, config.smem(),
                                st));
    return true;
  }

  // False (and where on stderr) when a wait of the last launches gave up; clears the record.
  bool hang_free(const std::string& what) {
    unsigned long long h[4] = {};
    CHECK_CUDA(cudaMemcpy(h, hang, sizeof h, cudaMemcpyDeviceToHost));
    if (h[0] == 0) return true;
    const unsigned long long r = h[3] >> 28;
    const char* role = r == 1   ? "producer on empty"
                       : r == 2 ? "consumer on full"
                                : "consumer on turn";
    std::fprintf(stderr,
                 "%s: %s: HANG: %s barrier of stage %llu (parity %llu) at step %llu, block %llu "
                 "thread %llu\n",
                 kWho, what.c_str(), role, (h[3] >> 20) & 0xff, (h[3] >> 16) & 1, h[3] & 0xffff,
                 h[1], h[2]);
    const unsigned long long zero[4] = {};
    CHECK_CUDA(cudaMemcpy(hang, zero, sizeof zero, cudaMemcpyHostToDevice));
    return false;
  }
};

// The small shapes every configuration is checked on first, element by element against the CPU:
// one K step (no ring wrap); four; then M, N and K all off the tiles (200 = 128 + 72, 320 =
// 256 + 64 = 2.5 x 128, 1000 = 15 x 64 + 40) with 16 K steps, so the ring wraps and each
// barrier's parity flips several times.
constexpr gemm::Shape kCheckShapes[] = {
    {"check_128x128x64", 128, 128, 64},
    {"check_128x256x256", 128, 256, 256},
    {"check_200x320x1000", 200, 320, 1000},
};

// A · W[0]^T + bias in double, from the device's operands: *ref_bias, and its GELU, *ref_gelu.
bool cpu_reference(const gemm::Data& d, std::vector<float>* ref_gelu,
                   std::vector<float>* ref_bias) {
  const size_t m = static_cast<size_t>(d.m), n = static_cast<size_t>(d.n),
               k = static_cast<size_t>(d.k);
  std::vector<uint16_t> a(m * k), w(n * k), bias(n);
  CHECK_CUDA(cudaMemcpy(a.data(), d.a, a.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(w.data(), d.w[0], w.size() * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(bias.data(), d.bias, bias.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> af(a.size()), wf(w.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = kiln::bench::half_to_float(a[i]);
  for (size_t i = 0; i < w.size(); ++i) wf[i] = kiln::bench::half_to_float(w[i]);
  ref_gelu->resize(m * n);
  ref_bias->resize(m * n);
  for (size_t r = 0; r < m; ++r)
    for (size_t c = 0; c < n; ++c) {
      double x = kiln::bench::half_to_float(bias[c]);
      for (size_t i = 0; i < k; ++i) x += static_cast<double>(af[r * k + i]) * wf[c * k + i];
      (*ref_bias)[r * n + c] = static_cast<float>(x);
      (*ref_gelu)[r * n + c] = static_cast<float>(0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))));
    }
  return true;
}

// Every configuration on every check shape; *passed is cleared by any wrong output or hang.
bool run_checks(const Module& mod, bool* passed) {
  for (const gemm::Shape& s : kCheckShapes) {
    gemm::Data d;
    std::vector<float> ref_gelu, ref_bias;
    bool ok = gemm::alloc_data(kWho, s, &d) && cpu_reference(d, &ref_gelu, &ref_bias);
    for (size_t i = 0; ok && i < std::size(kConfigs); ++i) {
      Prototype p;
      ok = p.init(mod, static_cast<int>(i), kConfigs[i], d);
      // One CTA a tile; then 2 CTAs taking every other tile (the ring runs on across tiles).
      for (const int64_t blocks : p.grids(d, 2)) {
        const std::string what =
            fmt::format("{} {} {} grid={}", s.name, kConfigs[i].way(), kConfigs[i].label(), blocks);
        std::fprintf(stderr, "%s: checking %s\n", kWho, what.c_str());
        std::vector<uint16_t> got(static_cast<size_t>(s.m * s.n));
        ok = ok &&
             kiln::bench::cuda_ok(kWho, cudaMemset(d.d, 0xFF, got.size() * 2), "cudaMemset") &&
             p.launch(d, blocks, 0, nullptr) &&
             kiln::bench::cuda_ok(kWho, cudaDeviceSynchronize(), "cudaDeviceSynchronize") &&
             kiln::bench::cuda_ok(
                 kWho, cudaMemcpy(got.data(), d.d, got.size() * 2, cudaMemcpyDeviceToHost),
                 "cudaMemcpy");
        if (!ok) break;
        const bool no_hang = p.hang_free(what);
        const std::vector<float>& ref = kConfigs[i].act == kBias ? ref_bias : ref_gelu;
        const double err = gemm::compare_output(kWho, what, got.data(), ref.data(), s.m, s.n);
        const bool good = no_hang && err < gemm::kTolerance;
        std::fprintf(stderr, "%s: %s: %s (max_err %.2e)\n", kWho, what.c_str(),
                     good ? "ok" : "WRONG", err);
        *passed = *passed && good;
      }
    }
    gemm::free_data(&d);
    if (!ok) return false;
  }
  return true;
}

// Every configuration on one shape, one CTA a tile and persistent (one CTA a multiprocessor, when
// that is fewer), each checked against cuBLASLt + GELU (bias-only ones: cuBLASLt alone) and timed;
// then each way's best.
bool time_wgmma(const Module& mod, const gemm::Shape& s, gemm::Data& d, bool* all_within) {
  bool ok = true;
  gemm::Timed best[std::size(kWays)];  // [act]
  std::string best_label[std::size(kWays)];
  for (gemm::Timed& b : best) b.us = INFINITY;
  for (size_t i = 0; i < std::size(kConfigs); ++i) {
    const Config& c = kConfigs[i];
    Prototype p;
    if (!p.init(mod, static_cast<int>(i), kConfigs[i], d)) {
      ok = false;
      continue;
    }
    for (const int64_t blocks : p.grids(d, mod.sms)) {
      auto launch = [&](int64_t j, cudaStream_t st) { return p.launch(d, blocks, j, st); };
      gemm::Timed t;
      const std::string label = fmt::format("{} grid={}{}", kConfigs[i].label(), blocks,
                                            blocks < p.tiles(d) ? " persistent" : "");
      const bool ran = gemm::check_and_time(kWho, s, d, c.way(), label, launch, &t, c.act == kBias);
      t.within = t.within && p.hang_free(fmt::format("{} {}", s.name, label));
      ok = ran && ok;
      *all_within = *all_within && t.within;
      if (ran && t.within && t.us < best[c.act].us) {
        best[c.act] = t;
        best_label[c.act] = label;
      }
    }
  }
  for (const Act a : {kGelu, kGeluFast, kBias})
    if (!best_label[a].empty())
      gemm::print(s, fmt::format("{} best", kWays[a]).c_str(), best_label[a], best[a].us,
                  best[a].err);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  // --compile-only: NVRTC-compile the module for sm_90a and stop (no GPU needed).
  // --check-only: the element-wise checks on the small shapes, no timing.
  const bool compile_only = argc > 1 && std::strcmp(argv[1], "--compile-only") == 0;
  const bool check_only = argc > 1 && std::strcmp(argv[1], "--check-only") == 0;
  cudaDeviceProp prop{};
  std::string arch = compile_only ? "sm_90" : kiln::bench::device_arch(kWho, &prop);
  if (arch.empty()) return 1;
  if (arch != "sm_90") {  // wgmma is Hopper's alone: nothing to measure elsewhere
    std::printf("%s: skipped: wgmma needs an sm_90 GPU, this one is %s\n", kWho, arch.c_str());
    return 0;
  }
  arch += "a";  // wgmma, setmaxnreg: the architecture-specific target
  const std::vector<gemm::Shape> shapes = gemm::shapes_from_args(argc, argv);

  std::vector<uint8_t> cubin;
  if (!gemm::compile_module(kWho, module_source(), arch, &cubin)) return 1;
  if (compile_only) {
    std::printf("%s: %zu configurations compiled for %s (cubin %zu bytes)\n", kWho,
                std::size(kConfigs), arch.c_str(), cubin.size());
    return 0;
  }
  Module mod;
  cudaKernel_t gelu = nullptr;
  mod.encode = tensor_map_encoder();
  mod.sms = prop.multiProcessorCount;
  if (mod.encode == nullptr || !gemm::load_library(kWho, cubin, &mod.lib, &gelu) ||
      !kiln::bench::cuda_ok(kWho, cudaMalloc(&mod.hang, 4 * sizeof(*mod.hang)), "cudaMalloc") ||
      !kiln::bench::cuda_ok(kWho, cudaMemset(mod.hang, 0, 4 * sizeof(*mod.hang)), "cudaMemset"))
    return 1;
  bool passed = true;
  bool ok = run_checks(mod, &passed);
  if (ok && !check_only) {
    auto ways = [&](const gemm::Shape& s, gemm::Data& d, bool* all_within) {
      return time_wgmma(mod, s, d, all_within);
    };
    ok = gemm::for_each_shape(kWho, shapes, gelu, ways);
  }
  cudaFree(mod.hang);
  cudaLibraryUnload(mod.lib);
  if (!passed) std::fprintf(stderr, "%s: a check on the small shapes failed\n", kWho);
  return ok && passed ? 0 : 1;
}
