// Skinny GEMM benchmark (not a test; needs a GPU): the decode GEMMs of a GPT-2-small and a
// Llama-0.85B layer (and each model's LM head; the Llama's QKV and gate/up also with the RMSNorm
// folded in, "qkv_norm" and "gate_up_norm"), fp16, at a few activation rows M, through every
// geometry the compiler would time (skinny_geometry and skinny_candidate_geometries of
// compiler/backend/lower/skinny_gemm_codegen.h) and through cuBLASLt (its heuristic's first
// choice) side by side. Each is captured as one CUDA graph of L launches in a row, each on its
// own copy of the weights (L copies: more than 512 MB, so no launch finds its weights in L2, as in
// a real decode step), launched as the runtime launches (programmatic dependent launch where the
// device has it, so each kernel's weight loads may overlap the one before, as between a real
// step's GEMMs); the time is the median of 20 replays over L. Every output (of the first copy)
// is checked against a CPU product in double: a wrong one fails the run. Each geometry runs
// through its general entry (M at run time) and through the entry specialised for M (as
// compile_sizes makes one: "sized" in its label).
//
//   build/tests/kernels/kernels_bench_skinny_gemm [MODEL[:GEMM] [M...]]
//       (default: both models, every GEMM, M = 1 4 8 16; e.g. llama:gate_up 8)
//   KILN_BENCH_KERNELS=DIR: kernel headers (skinny_gemm.cuh, ...) read from DIR where it has
//       them, instead of the built-in ones: a kernel change timed without rebuilding.
//   KILN_BENCH_MMA=KSPLIT:CHUNK[:WARPS],...: tensor-core geometries beyond the compiler's (below).
//   KILN_BENCH_ONLY=TEXT: only the skinny kernels whose label (below) contains TEXT (cuBLASLt
//       always runs): one kernel for a profiler to find (ncu --kernel-name regex:bench_skinny).
//
// Prints one JSON line per (model, GEMM, M, way): {"model", "gemm", "k", "n", "m", "way"
// ("skinny" or "cublaslt"), "config" (the geometry's label; "default" marks the compiler's
// choice), "us", "gbps" (weight bytes / time), "max_err" (largest |out - ref| / (1 + |ref|))}.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/skinny_gemm_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "runtime/launch_program.h"
#include "tests/kernels/bench_common.h"
#include "tests/kernels/bench_cublaslt.h"

namespace {

namespace compiler = kiln::compiler;
using kiln::ir::DimExpr;

constexpr int kRepeats = 20;
constexpr double kColdBytes = 512e6;  // weights over all copies: several times the L2
constexpr double kMaxErr = 4e-3;      // fp16 output, fp32 sums in another order

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_skinny_gemm: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
#define CHECK_CUDA(call) \
  if (!cuda_ok((call), #call)) return false
#define CHECK_LT(call) \
  if (!kiln::bench::lt_ok("bench_skinny_gemm", (call), #call)) return false

struct Gemm {
  const char* model;
  const char* name;
  int64_t k, n;       // n: rows of W (a gated GEMM writes n / 2 columns)
  bool gated;         // SiLU(gate) * up, W's rows in (gate, up) pairs
  bool norm = false;  // an RMSNorm of A's rows first (the kernel's prologue), as in a decoder
};

constexpr float kNormEps = 1e-5f;

using kiln::bench::half_to_float;

// One GEMM's data: L copies of W, A, D, and the CPU reference of D (from copy 0).
struct Data {
  int64_t copies = 0, m = 0, out_cols = 0;
  std::vector<void*> w;
  void *a = nullptr, *d = nullptr, *scale = nullptr;  // scale: the norm's, [K]
  std::vector<double> ref;
  ~Data() {
    for (void* p : w) cudaFree(p);
    cudaFree(a);
    cudaFree(d);
    cudaFree(scale);
  }
};

bool make_data(const Gemm& g, int64_t m, Data& data) {
  std::mt19937 rng(static_cast<uint32_t>(g.k * 7919 + g.n + m));
  const size_t w_elems = static_cast<size_t>(g.k * g.n);
  data.m = m;
  data.out_cols = g.gated ? g.n / 2 : g.n;
  data.copies = std::max<int64_t>(
      2, static_cast<int64_t>(std::ceil(kColdBytes / (static_cast<double>(w_elems) * 2))));
  std::vector<uint16_t> w(w_elems), a(static_cast<size_t>(m * g.k)), scale(g.k);
  for (auto& h : w) h = kiln::bench::random_half(rng, 6, 11);  // |w| < 1/8
  for (auto& h : a) h = kiln::bench::random_half(rng, 9, 14);  // |a| < 1
  for (auto& h : scale) h = kiln::bench::random_half(rng, 9, 14);
  for (int64_t c = 0; c < data.copies; ++c) {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, w_elems * 2));
    data.w.push_back(p);
    const void* src = c == 0 ? static_cast<const void*>(w.data()) : data.w[0];
    CHECK_CUDA(cudaMemcpy(p, src, w_elems * 2, cudaMemcpyDefault));
  }
  CHECK_CUDA(cudaMalloc(&data.a, a.size() * 2));
  CHECK_CUDA(cudaMemcpy(data.a, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(&data.d, static_cast<size_t>(m * g.n) * 2));
  CHECK_CUDA(cudaMalloc(&data.scale, scale.size() * 2));
  CHECK_CUDA(cudaMemcpy(data.scale, scale.data(), scale.size() * 2, cudaMemcpyHostToDevice));
  // The reference: D[i, j] = sum_k A[i, k] W[j, k] (gated: silu(row 2j) * row 2j + 1), with a
  // norm A[i, k] = x[i, k] * scale[k] / sqrt(mean_k x[i, k]^2 + eps).
  std::vector<float> af(a.size()), wf(w.size());
  std::transform(a.begin(), a.end(), af.begin(), half_to_float);
  std::transform(w.begin(), w.end(), wf.begin(), half_to_float);
  if (g.norm)
    for (int64_t i = 0; i < m; ++i) {
      float* row = af.data() + i * g.k;
      double squares = 0;
      for (int64_t k = 0; k < g.k; ++k) squares += static_cast<double>(row[k]) * row[k];
      const double r = 1 / std::sqrt(squares / static_cast<double>(g.k) + kNormEps);
      for (int64_t k = 0; k < g.k; ++k)
        row[k] = static_cast<float>(row[k] * r * half_to_float(scale[static_cast<size_t>(k)]));
    }
  std::vector<double> full(static_cast<size_t>(m * g.n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      const float* ar = af.data() + i * g.k;
      const float* wr = wf.data() + j * g.k;
      for (int64_t k = 0; k < g.k; ++k) s += static_cast<double>(ar[k]) * wr[k];
      full[static_cast<size_t>(i * g.n + j)] = s;
    }
  data.ref.resize(static_cast<size_t>(m * data.out_cols));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < data.out_cols; ++j) {
      if (!g.gated) {
        data.ref[static_cast<size_t>(i * data.out_cols + j)] =
            full[static_cast<size_t>(i * g.n + j)];
        continue;
      }
      const double gate = full[static_cast<size_t>(i * g.n + 2 * j)];
      const double up = full[static_cast<size_t>(i * g.n + 2 * j + 1)];
      data.ref[static_cast<size_t>(i * data.out_cols + j)] = gate / (1 + std::exp(-gate)) * up;
    }
  return true;
}

// Largest |out - ref| / (1 + |ref|) over the first copy's output (out_cols columns, row-major
// with row stride `ld`).
bool max_error(const Data& data, int64_t ld, double* err) {
  std::vector<uint16_t> out(static_cast<size_t>(data.m * ld));
  CHECK_CUDA(cudaMemcpy(out.data(), data.d, out.size() * 2, cudaMemcpyDeviceToHost));
  double e = 0;
  for (int64_t i = 0; i < data.m; ++i)
    for (int64_t j = 0; j < data.out_cols; ++j) {
      const double r = data.ref[static_cast<size_t>(i * data.out_cols + j)];
      const double d = std::fabs(half_to_float(out[static_cast<size_t>(i * ld + j)]) - r);
      e = std::isnan(d) ? INFINITY : std::max(e, d / (1 + std::fabs(r)));
    }
  *err = e;
  return true;
}

// Times every copy's launch in one graph: *us per launch.
template <typename Launch>
bool time_copies(const Data& data, Launch launch, double* us) {
  double ms = 0;
  if (!kiln::bench::time_graph_ms(data.copies, launch, kRepeats, &ms)) return false;
  *us = ms * 1e3 / static_cast<double>(data.copies);
  return true;
}

// The kernel headers: the embedded ones, or with KILN_BENCH_KERNELS=DIR, any file of DIR that
// has a header's name in its place (to time a kernel change without rebuilding).
std::vector<std::pair<std::string, std::string>> bench_headers() {
  auto headers = compiler::kernel_headers();
  const char* dir = std::getenv("KILN_BENCH_KERNELS");
  if (dir == nullptr || *dir == '\0') return headers;
  for (auto& [name, text] : headers) {
    std::ifstream in(std::string(dir) + "/" + name, std::ios::binary);
    if (!in) continue;
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "bench_skinny_gemm: %s from %s\n", name.c_str(), dir);
  }
  return headers;
}

// One skinny geometry: compiled for `arch` (the general entry, or with `specialised` the entry
// for size M, as compile_sizes makes it), timed, checked.
bool time_skinny(const compiler::SkinnyGemm& s, const compiler::SkinnyGeometry& geo,
                 const std::string& arch, bool programmatic, bool specialised, const Data& data,
                 double* us, double* err) {
  compiler::KernelDef def = compiler::codegen_skinny_gemm(s, geo);
  def.symbol = "bench_skinny";
  const std::vector<int64_t> sizes =
      specialised ? std::vector<int64_t>{data.m} : std::vector<int64_t>{};
  const std::string symbol =
      specialised ? compiler::specialised_symbol(def.symbol, data.m) : def.symbol;
  static const auto headers = bench_headers();
  auto cubin = compiler::nvrtc_compile(
      {"bench_skinny_gemm", compiler::codegen_module_source({def}, sizes), headers}, arch);
  if (!cubin.ok()) {
    std::fprintf(stderr, "bench_skinny_gemm: %s\n", cubin.status().to_string().c_str());
    return false;
  }
  cudaLibrary_t lib = nullptr;
  CHECK_CUDA(cudaLibraryLoadData(&lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t kernel = nullptr;
  CHECK_CUDA(cudaLibraryGetKernel(&kernel, lib, symbol.c_str()));
  const int64_t per_block = geo.warps / geo.ksplit * geo.rows;
  const dim3 grid(static_cast<unsigned>((s.n + per_block - 1) / per_block));
  const dim3 block(static_cast<unsigned>(32 * geo.warps));
  auto launch = [&](int64_t c, cudaStream_t st) {
    void* a = data.a;
    void* w = data.w[static_cast<size_t>(c)];
    void* d = data.d;
    void* scale = data.scale;
    float alpha = 1.0f, beta = 0.0f;
    long long size = data.m;
    void* plain[] = {&a, &w, &d, &alpha, &beta, &size};
    void* normed[] = {&a, &w, &scale, &d, &alpha, &beta, &size};
    CHECK_CUDA(kiln::runtime::launch_kernel(
        reinterpret_cast<const void*>(kernel), grid, block,
        s.norm != compiler::NormPrologue::kNone ? normed : plain, 0, st, programmatic));
    return true;
  };
  CHECK_CUDA(cudaMemset(data.d, 0xFF, static_cast<size_t>(data.m * s.n) * 2));
  if (!launch(0, nullptr)) return false;
  CHECK_CUDA(cudaDeviceSynchronize());
  if (!max_error(data, data.out_cols, err)) return false;
  const bool timed = time_copies(data, launch, us);
  cudaLibraryUnload(lib);
  return timed;
}

// cuBLASLt's first heuristic choice for the same product (the gated GEMM's [M, N] product
// without the gating: the bytes are the same), as the runtime describes it (gemm_plan.h).
bool time_cublaslt(cublasLtHandle_t lt, const Gemm& g, const Data& data, double* us, double* err) {
  const int64_t m = data.m, n = g.n, k = g.k;
  kiln::bench::LtProduct p;
  if (!p.init("bench_skinny_gemm", m, n, k)) return false;
  const uint64_t ws_bytes = kiln::bench::LtProduct::kWorkspaceBytes;
  // The heuristic's time, asked twice (the second may come from cuBLASLt's own memory): stderr.
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  double heuristic_ms[2] = {};
  for (double& t : heuristic_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.w, p.a, p.d, p.d, p.pref, 1, &result,
                                            &returned));
    t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::fprintf(stderr, "bench_skinny_gemm: %s %s M=%lld: heuristic %.3f ms, again %.3f ms\n",
               g.model, g.name, static_cast<long long>(m), heuristic_ms[0], heuristic_ms[1]);
  if (returned < 1) {
    std::fprintf(stderr, "bench_skinny_gemm: no cuBLASLt algorithm for %s %s\n", g.model, g.name);
    return false;
  }
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, ws_bytes));
  auto launch = [&](int64_t c, cudaStream_t st) {
    const float alpha = 1.0f, beta = 0.0f;
    CHECK_LT(cublasLtMatmul(lt, p.desc, &alpha, data.w[static_cast<size_t>(c)], p.w, data.a, p.a,
                            &beta, data.d, p.d, data.d, p.d, &result.algo, ws, ws_bytes, st));
    return true;
  };
  if (!launch(0, nullptr)) return false;
  CHECK_CUDA(cudaDeviceSynchronize());
  *err = 0;
  if (!g.gated && !g.norm && !max_error(data, n, err)) return false;  // the product alone
  const bool timed = time_copies(data, launch, us);
  cudaFree(ws);
  return timed;
}

void print(const Gemm& g, int64_t m, const char* way, const std::string& config, double us,
           double err) {
  const double gbps = static_cast<double>(g.k * g.n) * 2 / (us * 1e-6) / 1e9;
  std::printf(
      "{\"model\": \"%s\", \"gemm\": \"%s\", \"k\": %lld, \"n\": %lld, \"m\": %lld, \"way\": "
      "\"%s\", \"config\": \"%s\", \"us\": %.2f, \"gbps\": %.0f, \"max_err\": %.2g}\n",
      g.model, g.name, static_cast<long long>(g.k), static_cast<long long>(g.n),
      static_cast<long long>(m), way, config.c_str(), us, gbps, err);
  std::fflush(stdout);
}

// KILN_BENCH_MMA="KSPLIT:CHUNK[:WARPS],...": the tensor-core form with these settings as well
// (on the CUDA-core default's other settings), to try a geometry the compiler does not offer.
std::vector<compiler::SkinnyGeometry> extra_mma_geometries(const compiler::SkinnyGemm& s) {
  std::vector<compiler::SkinnyGeometry> out;
  const char* spec = std::getenv("KILN_BENCH_MMA");
  if (spec == nullptr) return out;
  std::string text(spec);
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    int ksplit = 0, chunk = 0, warps = 0;
    const int got =
        std::sscanf(text.substr(at, end - at).c_str(), "%d:%d:%d", &ksplit, &chunk, &warps);
    at = end + 1;
    if (got < 2 || ksplit < 1 || ksplit > 16 || chunk < 1 || chunk > 16) continue;
    compiler::SkinnyGeometry g = compiler::skinny_geometry(s);
    g.warps = std::max({g.warps, ksplit, got == 3 ? warps : 0});
    if (g.warps % ksplit != 0 || (g.warps / g.ksplit) * g.rows > 16 * (g.warps / ksplit)) continue;
    g.mma_ksplit = ksplit;
    g.mma_chunk = chunk;
    out.push_back(g);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  const std::string arch = kiln::bench::device_arch("bench_skinny_gemm", &prop);
  if (arch.empty()) return 1;
  const bool programmatic = prop.major >= 9;
  const Gemm gemms[] = {
      {"gpt2", "qkv", 768, 2304, false},
      {"gpt2", "o", 768, 768, false},
      {"gpt2", "fc", 768, 3072, false},
      {"gpt2", "proj", 3072, 768, false},
      {"gpt2", "head", 768, 50257, false},
      {"llama", "qkv", 2048, 3072, false},
      {"llama", "o", 2048, 2048, false},
      {"llama", "gate_up", 2048, 11264, true},
      {"llama", "down", 5632, 2048, false},
      {"llama", "head", 2048, 32000, false},
      // As a decode step runs them: the RMSNorm before them folded into the kernel (cuBLASLt's
      // time is the GEMM's alone; its route adds a norm kernel).
      {"llama", "qkv_norm", 2048, 3072, false, true},
      {"llama", "gate_up_norm", 2048, 11264, true, true},
  };
  // MODEL or MODEL:GEMM ("llama:gate_up").
  const std::string only = argc > 1 ? argv[1] : "";
  const size_t colon = only.find(':');
  const std::string only_model = only.substr(0, colon);
  const std::string only_gemm = colon == std::string::npos ? "" : only.substr(colon + 1);
  std::vector<int64_t> ms;
  for (int i = 2; i < argc; ++i) ms.push_back(std::atoll(argv[i]));
  if (ms.empty()) ms = {1, 4, 8, 16};
  // The first cuBLASLt handle of a process, timed (the runtime's load creates one): stderr.
  if (!cuda_ok(cudaFree(nullptr), "creating the context")) return 1;
  const auto t0 = std::chrono::steady_clock::now();
  cublasLtHandle_t lt = nullptr;
  if (!kiln::bench::lt_ok("bench_skinny_gemm", cublasLtCreate(&lt), "cublasLtCreate")) return 1;
  std::fprintf(
      stderr, "bench_skinny_gemm: cublasLtCreate took %.1f ms\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  const char* only_label = std::getenv("KILN_BENCH_ONLY");
  bool ok = true;
  for (const Gemm& g : gemms) {
    if ((!only_model.empty() && only_model != g.model) ||
        (!only_gemm.empty() && only_gemm != g.name))
      continue;
    for (int64_t m : ms) {
      Data data;
      if (!make_data(g, m, data)) return 1;
      compiler::SkinnyGemm s;
      s.dtype = kiln::DType::kF16;
      s.k = g.k;
      s.n = g.n;
      s.m = DimExpr::size();
      // Rows per pass as the lowering sets them for skinny_gemm_max_m = max(4, M).
      while (s.max_m < std::max<int64_t>(4, m)) s.max_m *= 2;
      if (g.gated) s.gate = compiler::GateAct::kSilu;
      if (g.norm) {
        s.norm = compiler::NormPrologue::kRms;
        s.norm_epsilon = kNormEps;
      }
      // The lowering's kernel (default geometry first, then the candidates), and for 1 < M < 8
      // also the kernel of skinny_gemm_max_m = 8 (its tensor-core form), marked "max_m=8".
      std::vector<std::pair<compiler::SkinnyGemm, compiler::SkinnyGeometry>> ways;
      std::vector<compiler::SkinnyGemm> kernels = {s};
      if (m > 1 && s.max_m < 8) {
        kernels.push_back(s);
        kernels.back().max_m = 8;
      }
      for (const compiler::SkinnyGemm& k : kernels) {
        ways.push_back({k, compiler::skinny_geometry(k)});
        for (const auto& c : compiler::skinny_candidate_geometries(k)) ways.push_back({k, c});
      }
      for (const compiler::SkinnyGeometry& c : extra_mma_geometries(s)) ways.push_back({s, c});
      // Each through its general entry and its entry specialised for M ("sized").
      for (size_t j = 0; j < 2 * ways.size(); ++j) {
        const size_t i = j / 2;
        const bool specialised = j % 2 == 1;
        double us = 0, err = 0;
        const auto& [kernel, geo] = ways[i];
        const std::string label =
            std::string(i == 0 ? "default " : "") + (specialised ? "sized " : "") +
            (kernel.max_m != s.max_m ? "max_m=8 " : "") + compiler::skinny_geometry_label(geo);
        if (only_label != nullptr && label.find(only_label) == std::string::npos) continue;
        if (!time_skinny(kernel, geo, arch, programmatic, specialised, data, &us, &err)) return 1;
        print(g, m, "skinny", label, us, err);
        if (!(err <= kMaxErr)) {
          std::fprintf(stderr, "bench_skinny_gemm: %s %s M=%lld %s: error %g\n", g.model, g.name,
                       static_cast<long long>(m), label.c_str(), err);
          ok = false;
        }
      }
      double us = 0, err = 0;
      if (!time_cublaslt(lt, g, data, &us, &err)) return 1;
      print(g, m, "cublaslt", "heuristic", us, err);
      if (!(err <= kMaxErr)) {
        std::fprintf(stderr, "bench_skinny_gemm: %s %s M=%lld cuBLASLt: error %g\n", g.model,
                     g.name, static_cast<long long>(m), err);
        ok = false;
      }
    }
  }
  cublasLtDestroy(lt);
  return ok ? 0 : 1;
}
