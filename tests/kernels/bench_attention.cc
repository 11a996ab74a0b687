// Prefill attention benchmark (not a test; needs a GPU): fp16 causal, B = 4, H = 16,
// head_dim 64 and 128, sequence 512, 1024, 2048.
//
//   build/tests/kernels/bench_attention [--dump DIR]
//   build/tests/kernels/bench_attention --sweep          # the default and every tuning candidate
//   build/tests/kernels/bench_attention --model [PICK]   # the benchmark models' attention
//   build/tests/kernels/bench_attention --source DIR     # no GPU: write the sweep's sources
//   python3 tools/bench_attention.py build/tests/kernels/bench_attention   # vs torch SDPA
//   python3 tools/bench_attention.py --sweep build/tests/kernels/bench_attention
//
// Builds the kernel through kiln's attention codegen (compiler/backend/lower/attention_codegen.h),
// NVRTC- compiles it for this GPU's arch, loads it with cudaLibraryLoadData and times it with CUDA
// events: 3 warm-up launches, then the median of 30, rotating 2 random input sets. Prints one
// JSON line per config: {"d", "seq", "ms", "tflops"} (causal FLOPs: 2·B·H·S²·D). With --dump,
// also writes q, k, v and the output of input set 0 as raw fp16 files into DIR (seq 512 only)
// so tools/bench_attention.py can check them against torch. --sweep times, for head dims 64, 80,
// 96 and 128, the default tiles and every launch candidate the autotuner would time
// (attention_prefill_candidates: the same function the lowering calls); the line gains "config"
// (the label) and "default". --model times the attention of tools/bench/model_bench.py's GPT-2
// and Llama as the lowering builds it (batch 1, Q/K/V read in place from the fused QKV product,
// with and without key padding) at 128 and 512 tokens, the default and every candidate; PICK
// ("gpt2:1:4:512") times one alone, for Nsight Compute. --source writes their module sources,
// the model shapes' too, and kiln's kernel headers
// into DIR (for `nvcc -cubin -Xptxas -v`: registers and spills) and NVRTC-compiles them for
// sm_80 and sm_90; it needs no GPU.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "runtime/median.h"

namespace {

namespace compiler = kiln::compiler;
using kiln::ir::DimExpr;
using kiln::runtime::median;

constexpr int kRepeats = 30;
constexpr int kSets = 2;
constexpr int64_t kB = 4, kH = 16;

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_attention: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
#define CHECK_CUDA(call) \
  if (!cuda_ok((call), #call)) return false

uint16_t to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (exp <= 0) return static_cast<uint16_t>(sign);  // inputs here are never tiny
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  // round to nearest even on the 13 dropped bits
  uint32_t h = sign | (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(h);
}

bool write_file(const std::string& path, const void* dev, size_t bytes) {
  std::vector<char> host(bytes);
  CHECK_CUDA(cudaMemcpy(host.data(), dev, bytes, cudaMemcpyDeviceToHost));
  std::ofstream f(path, std::ios::binary);
  f.write(host.data(), static_cast<std::streamsize>(bytes));
  return static_cast<bool>(f);
}

// Head dims the sweep covers (every head dim the tensor-core path takes).
constexpr int64_t kSweepDims[] = {64, 80, 96, 128};

compiler::AttnSpec bench_spec(int64_t d) {
  compiler::AttnSpec s;
  s.dtype = kiln::DType::kF16;
  s.B = DimExpr::constant(kB);
  s.Hq = s.Hkv = kH;
  s.Sq = s.Skv = DimExpr::size();
  s.D = s.Dv = d;
  s.scale = 1.0f / std::sqrt(static_cast<float>(d));
  s.causal = true;
  s.q = s.k = s.v = s.o = compiler::attn_view_contiguous(
      {s.B, DimExpr::constant(kH), DimExpr::size(), DimExpr::constant(d)});
  return s;
}

// A configuration to time: the default kernel or a launch candidate, named by its config label
// (empty outside the sweep: the line then carries no "config").
struct BenchConfig {
  std::string label;
  bool is_default = true;
  compiler::AttnKernel kernel;
};

// The default and every autotuner candidate of `s`: exactly what the lowering offers
// (attention_prefill_candidates), so the sweep measures what the tuner chooses between.
std::vector<BenchConfig> configs_of(const compiler::AttnSpec& s) {
  std::vector<BenchConfig> out = {
      {compiler::attention_prefill_config(s), true, compiler::codegen_attention_prefill(s)}};
  for (compiler::LaunchCandidate& c : compiler::attention_prefill_candidates(s)) {
    compiler::AttnKernel k;
    k.def = std::move(c.def);
    k.work = c.work;
    k.work_per_block = c.work_per_block;
    k.grid_y = c.grid_y;
    k.block = c.block;
    k.shared_bytes = c.shared_bytes;
    out.push_back({std::move(c.config), false, std::move(k)});
  }
  return out;
}

// --model: the attention of the benchmark models (tools/bench/model_bench.py) as the lowering
// builds it: batch 1, head_dim 64, Q, K and V read in place from the fused QKV GEMM's product
// ([S, (Hq + 2·Hkv)·64]), Y written into the merged-heads [S, Hq·64] buffer, with and without
// key padding (an int64 attention mask of ones). GPT-2 small (12 heads) and the 0.85B Llama
// (32 query heads, 8 KV heads) at 128 and 512 tokens, the default tiles and every candidate.
struct ModelShape {
  const char* name;
  int64_t hq, hkv;
};
constexpr ModelShape kModelShapes[] = {{"gpt2", 12, 12}, {"llama", 32, 8}};

compiler::AttnSpec model_spec(const ModelShape& m, bool kpad) {
  constexpr int64_t d = 64;
  const int64_t w = (m.hq + 2 * m.hkv) * d;
  compiler::AttnSpec s;
  s.dtype = kiln::DType::kF16;
  s.B = DimExpr::constant(1);
  s.Hq = m.hq;
  s.Hkv = m.hkv;
  s.Sq = s.Skv = DimExpr::size();
  s.D = s.Dv = d;
  s.scale = 0.125f;
  s.causal = true;
  auto view = [&](int64_t offset, int64_t row) {
    return compiler::AttnView{
        DimExpr::constant(offset),
        {DimExpr::size(row), DimExpr::constant(d), DimExpr::constant(row), DimExpr::constant(1)}};
  };
  s.q = view(0, w);
  s.k = view(m.hq * d, w);
  s.v = view((m.hq + m.hkv) * d, w);
  s.o = view(0, m.hq * d);
  s.has_kpad = kpad;
  s.kpad_dtype = kiln::DType::kI64;
  s.kpad_sb = DimExpr::size();
  return s;
}

// Writes the module source of every sweep configuration ("bench_attention_d64_c0.cu": c0 the
// default, cN candidate N-1, named in its first line) and the kernel headers into `dir`.
bool write_sources(const std::string& dir) {
  for (const auto& [name, text] : compiler::kernel_headers()) {
    std::ofstream f(dir + "/" + name);
    f << text;
    if (!f) return false;
  }
  std::vector<std::pair<std::string, compiler::AttnSpec>> specs;
  for (int64_t d : kSweepDims) specs.emplace_back(fmt::format("d{}", d), bench_spec(d));
  for (const ModelShape& m : kModelShapes)
    for (bool kpad : {false, true})
      specs.emplace_back(fmt::format("{}{}", m.name, kpad ? "_kpad" : ""), model_spec(m, kpad));
  for (const auto& [tag, spec] : specs) {
    std::vector<BenchConfig> configs = configs_of(spec);
    for (size_t i = 0; i < configs.size(); ++i) {
      compiler::KernelDef def = configs[i].kernel.def;
      def.symbol = fmt::format("bench_attention_{}_c{}", tag, i);
      const std::string source =
          fmt::format("// {}{}\n{}", configs[i].label, configs[i].is_default ? " (default)" : "",
                      compiler::codegen_module_source({def}, {}));
      std::ofstream f(fmt::format("{}/{}.cu", dir, def.symbol));
      f << source;
      if (!f) return false;
      // NVRTC, not only nvcc, must accept it (it is stricter, e.g. about lambdas).
      for (const char* arch : {"sm_80", "sm_90"}) {
        auto cubin = compiler::nvrtc_compile(
            compiler::NvrtcModule{def.symbol, source, compiler::kernel_headers()}, arch);
        if (!cubin.ok()) {
          std::fprintf(stderr, "bench_attention: %s\n", cubin.status().to_string().c_str());
          return false;
        }
      }
    }
  }
  return true;
}

// 3 warm-up launches, then the median ms of kRepeats, each between two CUDA events; launch(i)
// makes launch i.
bool median_launch_ms(const std::function<cudaError_t(int)>& launch, double* out) {
  for (int i = 0; i < 3; ++i) CHECK_CUDA(launch(i));
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<double> ms;
  bool ok = true;
  for (int i = 0; i < kRepeats && ok; ++i) {
    float t = 0;
    ok = cuda_ok(cudaEventRecord(e0), "cudaEventRecord") && cuda_ok(launch(i), "launch") &&
         cuda_ok(cudaEventRecord(e1), "cudaEventRecord") &&
         cuda_ok(cudaEventSynchronize(e1), "cudaEventSynchronize") &&
         cuda_ok(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  CHECK_CUDA(cudaGetLastError());
  *out = median(ms);
  return ok;
}

// Times kernel `k` (loaded as `fn`) at sequence length `seq` and prints the JSON line.
// `label`: extra JSON fields for the line (empty: none).
bool time_seq(int64_t d, int64_t seq, const compiler::AttnKernel& k, const void* fn,
              const std::string& label, const std::string& dump_dir) {
  const size_t n = static_cast<size_t>(kB * kH * seq * d);
  std::mt19937 rng(static_cast<uint32_t>(d * 7919 + seq));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint16_t> host(n);
  void* buf[kSets][4] = {};
  for (int set = 0; set < kSets; ++set)
    for (int t = 0; t < 4; ++t) {
      CHECK_CUDA(cudaMalloc(&buf[set][t], n * 2));
      for (auto& h : host) h = to_half(dist(rng));  // outputs too: never time on zeros
      CHECK_CUDA(cudaMemcpy(buf[set][t], host.data(), n * 2, cudaMemcpyHostToDevice));
    }
  const int64_t blocks = (k.work.eval(seq) + k.work_per_block - 1) / k.work_per_block;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(k.grid_y.eval(seq)));
  long long size_arg = seq;
  auto launch = [&](int set) {
    void* args[5] = {&buf[set][0], &buf[set][1], &buf[set][2], &buf[set][3], &size_arg};
    return cudaLaunchKernel(fn, grid, dim3(k.block), args, k.shared_bytes, nullptr);
  };
  double med = 0;
  if (!median_launch_ms([&](int i) { return launch(i % kSets); }, &med)) return false;
  const double flops = 2.0 * kB * kH * static_cast<double>(seq) * seq * d;  // causal half of 4·
  const std::string extra = label.empty() ? "" : ", " + label;
  std::printf("{\"d\": %lld, \"seq\": %lld, \"ms\": %.5f, \"tflops\": %.2f%s}\n",
              static_cast<long long>(d), static_cast<long long>(seq), med,
              flops / (med * 1e-3) / 1e12, extra.c_str());
  std::fflush(stdout);
  if (!dump_dir.empty() && seq == 512) {
    CHECK_CUDA(launch(0));
    CHECK_CUDA(cudaDeviceSynchronize());
    const char* names[4] = {"q", "k", "v", "o"};
    for (int t = 0; t < 4; ++t)
      if (!write_file(fmt::format("{}/{}_d{}_s{}.f16", dump_dir, names[t], d, seq), buf[0][t],
                      n * 2))
        return false;
  }
  for (auto& set : buf)
    for (void* p : set) cudaFree(p);
  return true;
}

// NVRTC-compiles kernel `k` (named by its def.symbol) for `arch` and loads it: `*fn` to launch,
// `*lib` to unload.
bool load_kernel(const compiler::AttnKernel& k, const std::string& arch, cudaLibrary_t* lib,
                 const void** fn) {
  compiler::NvrtcModule m{"bench_attention", compiler::codegen_module_source({k.def}, {}),
                          compiler::kernel_headers()};
  auto cubin = compiler::nvrtc_compile(m, arch);
  if (!cubin.ok()) {
    std::fprintf(stderr, "bench_attention: %s\n", cubin.status().to_string().c_str());
    return false;
  }
  CHECK_CUDA(cudaLibraryLoadData(lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t kernel = nullptr;
  CHECK_CUDA(cudaLibraryGetKernel(&kernel, *lib, k.def.symbol.c_str()));
  *fn = reinterpret_cast<const void*>(kernel);
  CHECK_CUDA(cudaFuncSetAttribute(*fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(k.shared_bytes)));
  return true;
}

// Compiles `config` once and times it at each of `seqs`.
bool bench(int64_t d, const std::vector<int64_t>& seqs, const BenchConfig& config,
           const std::string& arch, const std::string& dump_dir) {
  compiler::AttnKernel k = config.kernel;
  k.def.symbol = fmt::format("bench_attention_d{}", d);
  cudaLibrary_t lib = nullptr;
  const void* fn = nullptr;
  if (!load_kernel(k, arch, &lib, &fn)) return false;
  const std::string fields = config.label.empty()
                                 ? ""
                                 : fmt::format("\"config\": \"{}\", \"default\": {}", config.label,
                                               config.is_default ? "true" : "false");
  bool ok = true;
  for (int64_t seq : seqs) ok = time_seq(d, seq, k, fn, fields, dump_dir) && ok;
  cudaLibraryUnload(lib);
  return ok;
}

// Times loaded kernel `fn` (of `config`) on model shape `m` at sequence `seq`; prints the line.
bool time_model(const ModelShape& m, bool kpad, int64_t seq, const BenchConfig& config,
                const void* fn) {
  const compiler::AttnKernel& k = config.kernel;
  const size_t qkv_n = static_cast<size_t>(seq * (m.hq + 2 * m.hkv) * 64);
  const size_t o_n = static_cast<size_t>(seq * m.hq * 64);
  std::mt19937 rng(static_cast<uint32_t>(seq));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint16_t> host(qkv_n);
  for (auto& h : host) h = to_half(dist(rng));
  void *qkv = nullptr, *o = nullptr, *mask = nullptr;
  CHECK_CUDA(cudaMalloc(&qkv, qkv_n * 2));
  CHECK_CUDA(cudaMalloc(&o, o_n * 2));
  CHECK_CUDA(cudaMalloc(&mask, static_cast<size_t>(seq) * 8));
  CHECK_CUDA(cudaMemcpy(qkv, host.data(), qkv_n * 2, cudaMemcpyHostToDevice));
  std::vector<long long> ones(static_cast<size_t>(seq), 1);
  CHECK_CUDA(cudaMemcpy(mask, ones.data(), ones.size() * 8, cudaMemcpyHostToDevice));
  const int64_t blocks = (k.work.eval(seq) + k.work_per_block - 1) / k.work_per_block;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(k.grid_y.eval(seq)));
  long long size_arg = seq;
  std::vector<void*> args = {&qkv, &qkv, &qkv, &o};
  if (kpad) args.push_back(&mask);
  args.push_back(&size_arg);
  double med = 0;
  if (!median_launch_ms(
          [&](int) {
            return cudaLaunchKernel(fn, grid, dim3(k.block), args.data(), k.shared_bytes, nullptr);
          },
          &med))
    return false;
  const double flops = 2.0 * m.hq * static_cast<double>(seq) * seq * 64;
  std::printf(
      "{\"model\": \"%s\", \"seq\": %lld, \"kpad\": %s, \"config\": \"%s\", \"default\": %s, "
      "\"grid\": \"%ux%u\", \"us\": %.2f, \"tflops\": %.1f}\n",
      m.name, static_cast<long long>(seq), kpad ? "true" : "false", config.label.c_str(),
      config.is_default ? "true" : "false", grid.x, grid.y, med * 1e3, flops / (med * 1e-3) / 1e12);
  std::fflush(stdout);
  cudaFree(qkv);
  cudaFree(o);
  cudaFree(mask);
  return true;
}

// `pick` ("llama:1:4:512": model, key padding 0/1, config index, sequence) times that one
// alone, e.g. under Nsight Compute; empty times them all.
bool bench_models(const std::string& arch, const std::string& pick) {
  bool ok = true;
  for (const ModelShape& m : kModelShapes)
    for (bool kpad : {false, true}) {
      const std::vector<BenchConfig> configs = configs_of(model_spec(m, kpad));
      for (size_t i = 0; i < configs.size(); ++i) {
        std::vector<int64_t> seqs;  // compiled once for both
        for (int64_t seq : {128, 512})
          if (pick.empty() || pick == fmt::format("{}:{}:{}:{}", m.name, kpad ? 1 : 0, i, seq))
            seqs.push_back(seq);
        if (seqs.empty()) continue;
        compiler::AttnKernel k = configs[i].kernel;
        k.def.symbol = "bench_attention_model";
        cudaLibrary_t lib = nullptr;
        const void* fn = nullptr;
        if (!load_kernel(k, arch, &lib, &fn)) return false;
        for (int64_t seq : seqs) ok = time_model(m, kpad, seq, configs[i], fn) && ok;
        cudaLibraryUnload(lib);
      }
    }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dump_dir;
  bool sweep = false, model = false;
  std::string pick;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--dump" && i + 1 < argc) {
      dump_dir = argv[++i];
    } else if (a == "--source" && i + 1 < argc) {
      return write_sources(argv[i + 1]) ? 0 : 1;
    } else if (a == "--sweep") {
      sweep = true;
    } else if (a == "--model") {
      model = true;
      if (i + 1 < argc && argv[i + 1][0] != '-') pick = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--dump DIR | --sweep | --model [PICK] | --source DIR]\n",
                   argv[0]);
      return 2;
    }
  }
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    std::fprintf(stderr, "bench_attention: no CUDA device\n");
    return 1;
  }
  const std::string arch = fmt::format("sm_{}{}", prop.major, prop.minor);
  bool ok = true;
  const std::vector<int64_t> seqs = {512, 1024, 2048};
  if (model) return bench_models(arch, pick) ? 0 : 1;
  if (sweep) {
    for (int64_t d : kSweepDims)
      for (const BenchConfig& c : configs_of(bench_spec(d))) ok = bench(d, seqs, c, arch, "") && ok;
    return ok ? 0 : 1;
  }
  for (int64_t d : {64, 128})
    ok = bench(d, seqs, {"", true, compiler::codegen_attention_prefill(bench_spec(d))}, arch,
               dump_dir) &&
         ok;
  return ok ? 0 : 1;
}
