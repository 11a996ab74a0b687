// GPU: the sampling kernel (kernels/sampling.cuh through compiler/backend/lower/sampling_codegen)
// against the CPU reference (tests/support/sampling_ref.h), compiled by NVRTC for this GPU and
// launched directly: identical tokens for random logits in f32, f16 and bf16, vocabularies of
// 1, 7, 50257 and 128256, batches of 1, 8 and 64 with mixed per-row parameters (greedy, top-k,
// top-p, all three, plain temperature), strided rows and masked (-inf) logits; the same
// (seed, step) gives the same token at any row position and batch size; rows at or beyond the
// active count write nothing. The reference repeats the kernels' deciding arithmetic (their exp,
// fixed-point weights, integer sums), so every token must be equal, not merely close. Skips
// without a GPU; with one, each test asserts how many rows it compared.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/sampling_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "tests/support/gpu_model_check.h"
#include "tests/support/sampling_ref.h"

namespace kiln::testing {
namespace {

using compiler::SamplingKernel;
using compiler::SamplingLaunch;

constexpr int64_t kMaxRows = 64;
constexpr int64_t kVocabs[] = {1, 7, 50257, 128256};
constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Storage bits of a float that the dtype holds exactly (normal, zero or infinite).
uint16_t to_f16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  if ((u & 0x7fffffffu) == 0) return static_cast<uint16_t>(sign);
  if (std::isinf(f)) return static_cast<uint16_t>(sign | 0x7c00u);
  const uint32_t exp = ((u >> 23) & 0xffu) - 127 + 15;
  return static_cast<uint16_t>(sign | (exp << 10) | ((u & 0x7fffffu) >> 13));
}
uint16_t to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>(u >> 16);
}

// One row of logits the dtype holds exactly: f32 any value; f16 multiples of 1/64 below 16;
// bf16 multiples of 1/16 below 16 (many ties in a large vocabulary). A few -inf (masked tokens),
// never all of them.
std::vector<float> random_row(std::mt19937& rng, DType dt, int64_t vocab) {
  std::normal_distribution<float> d(0.0f, 2.5f);
  std::uniform_int_distribution<int> mask(0, 9);
  std::vector<float> x(static_cast<size_t>(vocab));
  for (float& v : x) {
    const float g = std::clamp(d(rng), -15.5f, 15.5f);
    v = dt == DType::kF32   ? g
        : dt == DType::kF16 ? std::round(g * 64) / 64
                            : std::round(g * 16) / 16;
    if (mask(rng) == 0) v = -INFINITY;
  }
  x[static_cast<size_t>(rng() % vocab)] = 1.0f;  // at least one finite logit
  return x;
}

SamplingParams random_params(std::mt19937& rng, int kind) {
  SamplingParams p;
  p.seed = (static_cast<uint64_t>(rng()) << 32) | rng();
  p.step = rng() % 1000;
  std::uniform_real_distribution<float> temp(0.3f, 1.6f), top_p(0.3f, 0.97f);
  switch (kind % 5) {
    case 0:  // greedy
      break;
    case 1:  // top-k
      p.temperature = temp(rng);
      p.top_k = 2 + static_cast<int32_t>(rng() % 60);
      break;
    case 2:  // top-p
      p.temperature = temp(rng);
      p.top_p = top_p(rng);
      break;
    case 3:  // all three
      p.temperature = temp(rng);
      p.top_k = 2 + static_cast<int32_t>(rng() % 500);
      p.top_p = top_p(rng);
      break;
    default:  // temperature over the whole vocabulary
      p.temperature = temp(rng);
  }
  return p;
}

// The kernels of every (dtype, vocabulary), compiled for this GPU once.
class SamplingKernels {
 public:
  static SamplingKernels* get(std::string* why) {
    static std::unique_ptr<SamplingKernels> k;
    static std::string error;
    if (!k && error.empty()) {
      auto made = std::make_unique<SamplingKernels>();
      error = made->load();
      if (error.empty()) k = std::move(made);
    }
    *why = error;
    return k.get();
  }

  std::string load() {
    std::vector<compiler::KernelDef> defs;
    for (DType dt : kDtypes)
      for (int64_t v : kVocabs) {
        SamplingLaunch l = compiler::codegen_sampling({dt, v, kMaxRows, true});
        defs.push_back(l.def);
        launches_[{dt, v}] = std::move(l);
      }
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaGetDeviceProperties(&prop, device) != cudaSuccess)
      return "no CUDA device properties";
    const std::string arch = fmt::format("sm_{}{}", prop.major, prop.minor);
    auto cubin =
        compiler::nvrtc_compile({"sampling_gpu_test", compiler::codegen_module_source(defs, {}),
                                 compiler::kernel_headers()},
                                arch);
    if (!cubin.ok()) return cubin.status().to_string();
    cudaLibrary_t lib = nullptr;
    if (cudaLibraryLoadData(&lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0) !=
        cudaSuccess)
      return "cudaLibraryLoadData failed";
    for (auto& [key, l] : launches_) {
      cudaKernel_t kernel = nullptr;
      if (cudaLibraryGetKernel(&kernel, lib, l.def.symbol.c_str()) != cudaSuccess)
        return "no kernel " + l.def.symbol;
      fns_[key] = reinterpret_cast<const void*>(kernel);
    }
    return "";
  }

  const SamplingLaunch& launch(DType dt, int64_t v) const { return launches_.at({dt, v}); }
  const void* fn(DType dt, int64_t v) const { return fns_.at({dt, v}); }

 private:
  std::map<std::pair<DType, int64_t>, SamplingLaunch> launches_;
  std::map<std::pair<DType, int64_t>, const void*> fns_;
};

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  explicit DeviceBuffer(size_t n) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  void put(const std::vector<T>& h) {
    EXPECT_EQ(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> get(size_t n) const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

struct Batch {
  std::vector<std::vector<float>> logits;  // [rows][vocab]
  std::vector<SamplingParams> params;
};

struct GpuResult {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

constexpr int32_t kPoisonToken = 0x5a5a5a5a;

// Runs the kernel over `b` (rows a stride of vocab + 3 apart) with `active` rows active
// (-1: no count, every row); the token and logprob buffers start poisoned.
GpuResult run(const SamplingKernels& k, DType dt, int64_t vocab, const Batch& b, int active = -1) {
  const size_t rows = b.logits.size();
  const int64_t stride = vocab + 3;
  std::vector<uint8_t> host(rows * static_cast<size_t>(stride) * dtype_size(dt), 0);
  for (size_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < vocab; ++i) {
      const float v = b.logits[r][static_cast<size_t>(i)];
      const size_t at = r * static_cast<size_t>(stride) + static_cast<size_t>(i);
      if (dt == DType::kF32) {
        std::memcpy(host.data() + at * 4, &v, 4);
      } else {
        const uint16_t bits = dt == DType::kF16 ? to_f16_bits(v) : to_bf16_bits(v);
        std::memcpy(host.data() + at * 2, &bits, 2);
      }
    }
  std::vector<float> temp, top_p;
  std::vector<int32_t> top_k;
  std::vector<unsigned long long> seed, step;
  for (const SamplingParams& p : b.params) {
    temp.push_back(p.temperature);
    top_k.push_back(p.top_k);
    top_p.push_back(p.top_p);
    seed.push_back(p.seed);
    step.push_back(p.step);
  }
  DeviceBuffer<uint8_t> d_logits(host.size());
  DeviceBuffer<float> d_temp(rows), d_top_p(rows), d_lp(rows);
  DeviceBuffer<int32_t> d_top_k(rows), d_tokens(rows), d_active(1);
  DeviceBuffer<unsigned long long> d_seed(rows), d_step(rows);
  d_logits.put(host);
  d_temp.put(temp);
  d_top_p.put(top_p);
  d_top_k.put(top_k);
  d_seed.put(seed);
  d_step.put(step);
  d_tokens.put(std::vector<int32_t>(rows, kPoisonToken));
  d_lp.put(std::vector<float>(rows, -12345.0f));
  d_active.put({active});
  long long row_stride = stride, size = 0;
  int* active_ptr = active >= 0 ? d_active.p : nullptr;
  void* args[] = {&d_logits.p, &row_stride, &d_temp.p,   &d_top_k.p, &d_top_p.p, &d_seed.p,
                  &d_step.p,   &active_ptr, &d_tokens.p, &d_lp.p,    &size};
  const SamplingLaunch& l = k.launch(dt, vocab);
  // Launch only the batch's rows (the compiled maximum is a bound; fewer CTAs is a smaller batch).
  EXPECT_EQ(cudaLaunchKernel(k.fn(dt, vocab), dim3(static_cast<unsigned>(rows)), dim3(l.block),
                             args, 0, nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return {d_tokens.get(rows), d_lp.get(rows)};
}

// Skips the test without a GPU; with one, the kernels must have compiled and loaded.
#define SAMPLING_KERNELS_OR_SKIP(k)                \
  std::string why;                                 \
  if (!gpu_available(&why)) GTEST_SKIP() << why;   \
  SamplingKernels* k = SamplingKernels::get(&why); \
  ASSERT_NE(k, nullptr) << why

TEST(SamplingGpu, TokensMatchTheReference) {
  SAMPLING_KERNELS_OR_SKIP(k);
  std::mt19937 rng(21);
  int compared = 0;
  for (DType dt : kDtypes)
    for (int64_t vocab : kVocabs)
      for (int rows : {1, 8, 64}) {
        SCOPED_TRACE(fmt::format("{} vocab {} rows {}", dtype_name(dt), vocab, rows));
        Batch b;
        for (int r = 0; r < rows; ++r) {
          b.logits.push_back(random_row(rng, dt, vocab));
          b.params.push_back(random_params(rng, r + rows));
        }
        const GpuResult g = run(*k, dt, vocab, b);
        for (int r = 0; r < rows; ++r) {
          const SampledToken ref = sample_ref(b.logits[r], b.params[r]);
          ++compared;
          EXPECT_EQ(g.tokens[r], ref.token)
              << "row " << r << " temperature " << b.params[r].temperature << " top_k "
              << b.params[r].top_k << " top_p " << b.params[r].top_p;
          EXPECT_NEAR(g.logprobs[r], ref.logprob, 2e-3) << "row " << r;
        }
      }
  EXPECT_EQ(compared, 3 * 4 * (1 + 8 + 64));
}

TEST(SamplingGpu, SameSeedAndStepSameTokenAnywhereInAnyBatch) {
  SAMPLING_KERNELS_OR_SKIP(k);
  std::mt19937 rng(22);
  int compared = 0, varied = 0;
  for (DType dt : kDtypes)
    for (int64_t vocab : {int64_t{7}, int64_t{50257}}) {
      // Probe rows: one of each kind of parameters.
      for (int kind = 1; kind < 5; ++kind) {
        SCOPED_TRACE(fmt::format("{} vocab {} kind {}", dtype_name(dt), vocab, kind));
        const std::vector<float> probe = random_row(rng, dt, vocab);
        const SamplingParams pp = random_params(rng, kind);
        std::vector<int32_t> seen;
        for (auto [rows, at] : {std::pair<int, int>{1, 0}, {8, 0}, {8, 5}, {64, 63}, {64, 17}}) {
          Batch b;
          for (int r = 0; r < rows; ++r) {
            b.logits.push_back(r == at ? probe : random_row(rng, dt, vocab));
            b.params.push_back(r == at ? pp : random_params(rng, r));
          }
          seen.push_back(run(*k, dt, vocab, b).tokens[at]);
          ++compared;
        }
        for (int32_t t : seen) EXPECT_EQ(t, seen[0]);
        // Another step is another draw: over 50 steps a sampled row varies when no token holds
        // 3/4 of the kept mass (all 50 alike then has odds below 1e-6).
        const std::vector<double> probs = sampling_kept_probs(probe, pp, sampling_kept(probe, pp));
        if (*std::max_element(probs.begin(), probs.end()) < 0.75) {
          Batch b;
          for (int s = 0; s < 50; ++s) {
            b.logits.push_back(probe);
            SamplingParams p = pp;
            p.step = pp.step + static_cast<uint64_t>(s);
            b.params.push_back(p);
          }
          const GpuResult g = run(*k, dt, vocab, b);
          bool varies = false;
          for (int32_t t : g.tokens) varies = varies || t != g.tokens[0];
          EXPECT_TRUE(varies);
          ++varied;
        }
      }
    }
  EXPECT_EQ(compared, 3 * 2 * 4 * 5);
  EXPECT_GT(varied, 0);
}

TEST(SamplingGpu, RowsBeyondTheActiveCountWriteNothing) {
  SAMPLING_KERNELS_OR_SKIP(k);
  std::mt19937 rng(23);
  int checked = 0;
  for (DType dt : kDtypes)
    for (int active : {0, 1, 5}) {
      SCOPED_TRACE(fmt::format("{} active {}", dtype_name(dt), active));
      Batch b;
      for (int r = 0; r < 8; ++r) {
        b.logits.push_back(random_row(rng, dt, 50257));
        b.params.push_back(random_params(rng, r));
      }
      const GpuResult g = run(*k, dt, 50257, b, active);
      for (int r = 0; r < 8; ++r) {
        ++checked;
        if (r < active) {
          EXPECT_EQ(g.tokens[r], sample_ref(b.logits[r], b.params[r]).token) << "row " << r;
        } else {
          EXPECT_EQ(g.tokens[r], kPoisonToken) << "row " << r;
          EXPECT_EQ(g.logprobs[r], -12345.0f) << "row " << r;
        }
      }
    }
  EXPECT_EQ(checked, 3 * 3 * 8);
}

}  // namespace
}  // namespace kiln::testing
