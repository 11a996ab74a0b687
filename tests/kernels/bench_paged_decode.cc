// Paged decode attention benchmark (not a test; needs a GPU): one decode step's split and
// combine launches, from kernels/paged_attention.cuh through compiler/backend/lower/
// paged_attention_codegen.h, for a GPT-2-small layer (12 heads, head dim 64) and a
// Llama-0.85B layer (32 query / 8 kv heads, head dim 64, rotary applied to the queries in the
// kernel as the Llama's decode does), fp16, 512 tokens of context per row, batch 1, 8, 32 and
// 64. Each configuration (query heads per block, partition) is captured as one CUDA graph
// of L layers' steps, launched as the runtime launches them (programmatic dependent launch on
// Hopper), each layer with its own cache, L large enough that the caches (more than 200 MB)
// never sit in L2 as one layer's would in a real model; the time is the median of 20 replays
// over L. Every configuration's output is compared with the first configuration's (group 1, no
// split) of the same shape: a wrong one fails the run.
//
//   build/tests/kernels/kernels_bench_paged_decode [MODEL [BATCH...]]   (default: both, all)
//
// Prints one JSON line per (shape, batch, configuration): {"model", "batch", "group",
// "partition", "default" (the lowering's choice for the batch: paged_decode_config),
// "fresh" (the default configuration again, as the decode route's split kernel with the append
// inside: Config::fresh, compared with the first configuration over the caches it wrote), "us",
// "gbps" (cache bytes read / time), "max_diff"}.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/paged_attention_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "runtime/launch_program.h"
#include "tests/kernels/bench_common.h"

namespace {

namespace compiler = kiln::compiler;
using kiln::ir::DimExpr;

constexpr int64_t kBlockSize = 16;
constexpr int64_t kContext = 512;
constexpr int64_t kMaxBlocksPerSeq = 2048 / kBlockSize;
constexpr int kRepeats = 20;
constexpr double kColdBytes = 256e6;  // caches over all layers: several times the L2
constexpr double kMaxDiff = 2e-3;     // fp16 outputs of the same math in another order

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_paged_decode: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
#define CHECK_CUDA(call) \
  if (!cuda_ok((call), #call)) return false

struct Shape {
  const char* model;
  int64_t hq, hkv, d;
  int64_t rotary_dim;  // 0: none; else half-pair rotary over the first rotary_dim elements
};

struct Config {
  int64_t group, partition;
  bool is_default;
  // The decode route's split kernel with the append inside (decode_fresh,
  // kv_cache.decode_append): it writes each row's new key and value (here read from the query
  // buffer) at the slot of its last position, and attends over them.
  bool fresh = false;
};

compiler::PagedAttnSpec spec_of(const Shape& sh, int64_t batch, const Config& c) {
  compiler::PagedAttnSpec s;
  s.dtype = kiln::DType::kF16;
  s.Hq = sh.hq;
  s.Hkv = sh.hkv;
  s.D = s.Dv = sh.d;
  s.block_size = kBlockSize;
  s.max_blocks_per_seq = kMaxBlocksPerSeq;
  s.rows = DimExpr::constant(batch);
  s.q_len = DimExpr::constant(1);
  s.scale = 1.0f / std::sqrt(static_cast<float>(sh.d));
  s.decode_group = c.group;
  s.partition = c.partition;
  s.decode_fresh = c.fresh;
  compiler::paged_attn_contiguous_strides(s);
  s.rotary_dim = sh.rotary_dim;
  s.rotary_width = sh.rotary_dim / 2;
  s.rotary_st = DimExpr::constant(s.rotary_width);
  return s;
}

// What the lowering chooses for this shape and batch (paged_decode_config).
Config chosen_config(const Shape& sh, int64_t batch) {
  const compiler::PagedDecodeConfig c =
      compiler::paged_decode_config(spec_of(sh, batch, {1, 0, false}), batch);
  return {c.group, c.partition, true};
}

struct Loaded {
  cudaLibrary_t lib = nullptr;
  compiler::AttnKernel split, combine;
  const void* fn[2] = {};
};

bool load(const compiler::PagedAttnSpec& s, const std::string& arch, Loaded& m) {
  m.split = compiler::codegen_paged_decode_split(s);
  m.combine = compiler::codegen_paged_decode_combine(s);
  m.split.def.symbol = "bench_split";
  m.combine.def.symbol = "bench_combine";
  auto cubin = compiler::nvrtc_compile(
      {"bench_paged_decode", compiler::codegen_module_source({m.split.def, m.combine.def}, {}),
       compiler::kernel_headers()},
      arch);
  if (!cubin.ok()) {
    std::fprintf(stderr, "bench_paged_decode: %s\n", cubin.status().to_string().c_str());
    return false;
  }
  CHECK_CUDA(cudaLibraryLoadData(&m.lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  cudaKernel_t k[2] = {};
  CHECK_CUDA(cudaLibraryGetKernel(&k[0], m.lib, "bench_split"));
  CHECK_CUDA(cudaLibraryGetKernel(&k[1], m.lib, "bench_combine"));
  m.fn[0] = reinterpret_cast<const void*>(k[0]);
  m.fn[1] = reinterpret_cast<const void*>(k[1]);
  return true;
}

dim3 grid_of(const compiler::AttnKernel& k) {
  return dim3(static_cast<unsigned>((k.work.eval(0) + k.work_per_block - 1) / k.work_per_block),
              static_cast<unsigned>(k.grid_y.eval(0)));
}

// The inputs of one shape and batch: L layers' caches (every row's blocks its own), the block
// tables, context lengths, queries, and the output and partials buffers.
struct Inputs {
  int64_t layers = 0, batch = 0;
  std::vector<void*> key, value;
  void *q = nullptr, *tables = nullptr, *lens = nullptr, *out = nullptr, *part = nullptr;
  void* slots = nullptr;                // int64 per row: the cache slot of its last position
  void *cos = nullptr, *sin = nullptr;  // rotary tables: a row of rotary_dim / 2 per batch row
  size_t out_bytes = 0;
  double layer_bytes = 0;
  ~Inputs() {
    for (void* p : key) cudaFree(p);
    for (void* p : value) cudaFree(p);
    for (void* p : {q, tables, lens, out, part, cos, sin, slots}) cudaFree(p);
  }
};

bool make_inputs(const Shape& sh, int64_t batch, Inputs& in) {
  std::mt19937 rng(static_cast<uint32_t>(sh.hq * 131 + batch));
  const int64_t blocks = batch * kContext / kBlockSize;
  const size_t cache_elems = static_cast<size_t>(blocks * sh.hkv * kBlockSize * sh.d);
  in.batch = batch;
  in.layer_bytes = 2.0 * static_cast<double>(cache_elems) * 2;
  in.layers = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(kColdBytes / in.layer_bytes)));
  std::vector<uint16_t> host(cache_elems);
  for (int64_t l = 0; l < in.layers; ++l)
    for (auto* list : {&in.key, &in.value}) {
      void* p = nullptr;
      CHECK_CUDA(cudaMalloc(&p, cache_elems * 2));
      list->push_back(p);
      if (l < 2) {  // two distinct layers' values are enough; the rest only need the bytes
        for (auto& h : host) h = kiln::bench::random_half(rng, 8, 14);
        CHECK_CUDA(cudaMemcpy(p, host.data(), cache_elems * 2, cudaMemcpyHostToDevice));
      } else {
        CHECK_CUDA(cudaMemcpy(p, list->at(l % 2), cache_elems * 2, cudaMemcpyDeviceToDevice));
      }
    }
  // Row b's blocks: a shuffled permutation of the pool, as a running cache would hand them out.
  std::vector<int32_t> pool(static_cast<size_t>(blocks));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<int32_t>(i);
  std::shuffle(pool.begin(), pool.end(), rng);
  std::vector<int32_t> tables(static_cast<size_t>(batch * kMaxBlocksPerSeq), 0);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < kContext / kBlockSize; ++j)
      tables[b * kMaxBlocksPerSeq + j] = pool[b * (kContext / kBlockSize) + j];
  const std::vector<int32_t> lens(static_cast<size_t>(batch), static_cast<int32_t>(kContext));
  std::vector<int64_t> slots(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b)
    slots[b] = static_cast<int64_t>(tables[b * kMaxBlocksPerSeq + (kContext - 1) / kBlockSize]) *
                   kBlockSize +
               (kContext - 1) % kBlockSize;
  CHECK_CUDA(cudaMalloc(&in.slots, slots.size() * 8));
  CHECK_CUDA(cudaMemcpy(in.slots, slots.data(), slots.size() * 8, cudaMemcpyHostToDevice));
  std::vector<uint16_t> q(static_cast<size_t>(batch * sh.hq * sh.d));
  for (auto& h : q) h = kiln::bench::random_half(rng, 8, 14);
  in.out_bytes = q.size() * 2;
  CHECK_CUDA(cudaMalloc(&in.q, q.size() * 2));
  CHECK_CUDA(cudaMemcpy(in.q, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(&in.tables, tables.size() * 4));
  CHECK_CUDA(cudaMemcpy(in.tables, tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(&in.lens, lens.size() * 4));
  CHECK_CUDA(cudaMemcpy(in.lens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(&in.out, in.out_bytes));
  std::vector<uint16_t> table(static_cast<size_t>(batch * std::max<int64_t>(sh.rotary_dim / 2, 1)));
  for (void** t : {&in.cos, &in.sin}) {
    for (auto& h : table) h = kiln::bench::random_half(rng, 8, 14);
    CHECK_CUDA(cudaMalloc(t, table.size() * 2));
    CHECK_CUDA(cudaMemcpy(*t, table.data(), table.size() * 2, cudaMemcpyHostToDevice));
  }
  // Partials for the finest partition timed (16 tokens).
  const size_t part =
      static_cast<size_t>(batch * sh.hq * (kMaxBlocksPerSeq * kBlockSize / 16) * (sh.d + 2));
  CHECK_CUDA(cudaMalloc(&in.part, part * 4));
  return true;
}

bool launch_layer(const Loaded& m, const Inputs& in, int64_t l, bool split, bool rotary, bool fresh,
                  bool programmatic, cudaStream_t st) {
  void* key = in.key[l];
  void* value = in.value[l];
  void* q = in.q;
  void* tables = in.tables;
  void* lens = in.lens;
  void* out = in.out;
  void* part = in.part;
  void* cos = in.cos;
  void* sin = in.sin;
  long long size = 0;
  void* slots = in.slots;
  // The kernels' parameters in order: rotary tables after the output, `part`, the fresh
  // kernel's k, v (both the query buffer) and slot_mapping.
  std::vector<void*> args = {&q, &key, &value, &tables, &lens, &out};
  if (rotary) args.insert(args.end(), {&cos, &sin});
  if (split) args.push_back(&part);
  std::vector<void*> split_args = args;
  if (fresh) split_args.insert(split_args.end(), {&q, &q, &slots});
  args.push_back(&size);
  split_args.push_back(&size);
  CHECK_CUDA(kiln::runtime::launch_kernel(m.fn[0], grid_of(m.split), dim3(m.split.block),
                                          split_args.data(), 0, st, programmatic));
  if (split)
    CHECK_CUDA(kiln::runtime::launch_kernel(m.fn[1], grid_of(m.combine), dim3(m.combine.block),
                                            args.data(), 0, st, programmatic));
  return true;
}

// Times `c` on `in` (not when `us` is null); `out` receives layer 0's output (fp16 bits).
bool time_config(const Shape& sh, const Config& c, const std::string& arch, bool programmatic,
                 const Inputs& in, double* us, std::vector<uint16_t>& out) {
  const compiler::PagedAttnSpec s = spec_of(sh, in.batch, c);
  Loaded m;
  if (!load(s, arch, m)) return false;
  const bool split = c.partition > 0;
  CHECK_CUDA(cudaMemset(in.out, 0xFF, in.out_bytes));
  const bool rotary = sh.rotary_dim > 0;
  if (!launch_layer(m, in, 0, split, rotary, c.fresh, programmatic, nullptr)) return false;
  CHECK_CUDA(cudaDeviceSynchronize());
  out.resize(in.out_bytes / 2);
  CHECK_CUDA(cudaMemcpy(out.data(), in.out, in.out_bytes, cudaMemcpyDeviceToHost));
  if (us == nullptr) {
    cudaLibraryUnload(m.lib);
    return true;
  }
  double ms = 0;
  if (!kiln::bench::time_graph_ms(
          in.layers,
          [&](int64_t l, cudaStream_t st) {
            return launch_layer(m, in, l, split, rotary, c.fresh, programmatic, st);
          },
          kRepeats, &ms))
    return false;
  *us = ms * 1e3 / static_cast<double>(in.layers);
  cudaLibraryUnload(m.lib);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  const std::string arch = kiln::bench::device_arch("bench_paged_decode", &prop);
  if (arch.empty()) return 1;
  const bool programmatic = prop.major >= 9;  // as the runtime launches
  const Shape shapes[] = {{"gpt2", 12, 12, 64, 0}, {"llama", 32, 8, 64, 64}};
  const std::string only = argc > 1 ? argv[1] : "";
  std::vector<int64_t> batches;
  for (int i = 2; i < argc; ++i) batches.push_back(std::atoll(argv[i]));
  if (batches.empty()) batches = {1, 8, 32, 64};
  bool ok = true;
  for (const Shape& sh : shapes) {
    if (!only.empty() && only != sh.model) continue;
    const int64_t share = sh.hq / sh.hkv;
    const int64_t most = compiler::paged_decode_default_group(spec_of(sh, 1, {1, 0, false}));
    for (int64_t batch : batches) {
      // The reference first (group 1, no split), then every grouping up to the default group
      // at every partition, and the lowering's choice marked.
      const Config chosen = chosen_config(sh, batch);
      std::vector<Config> configs = {{1, 0, false}};
      for (int64_t g : share > 1 ? std::vector<int64_t>{1, share} : std::vector<int64_t>{1})
        for (int64_t part : {0, 16, 32, 64, 128, 256})
          if ((g == 1 || g <= most) && !(g == 1 && part == 0)) configs.push_back({g, part, false});
      if (std::none_of(configs.begin(), configs.end(), [&](const Config& c) {
            return c.group == chosen.group && c.partition == chosen.partition;
          }))
        configs.push_back(chosen);
      for (Config& c : configs)
        c.is_default = c.group == chosen.group && c.partition == chosen.partition;
      // The fresh kernel last: it writes into the caches.
      configs.push_back({chosen.group, chosen.partition, true, true});
      Inputs in;
      if (!make_inputs(sh, batch, in)) return 1;
      std::vector<uint16_t> ref;
      for (size_t i = 0; i < configs.size(); ++i) {
        double us = 0;
        std::vector<uint16_t> out;
        if (!time_config(sh, configs[i], arch, programmatic, in, &us, out)) return 1;
        if (i == 0) ref = out;
        if (configs[i].fresh)  // its reference: the plain kernel over the caches it wrote
          if (!time_config(sh, configs[0], arch, programmatic, in, nullptr, ref)) return 1;
        double diff = 0;
        for (size_t e = 0; e < out.size(); ++e) {
          const double d = std::fabs(static_cast<double>(kiln::bench::half_to_float(out[e])) -
                                     kiln::bench::half_to_float(ref[e]));
          diff = std::isnan(d) ? INFINITY : std::max(diff, d);
        }
        if (!(diff <= kMaxDiff)) {
          std::fprintf(stderr,
                       "bench_paged_decode: %s batch %lld group %lld partition %lld: output "
                       "differs from the reference by %g\n",
                       sh.model, static_cast<long long>(batch),
                       static_cast<long long>(configs[i].group),
                       static_cast<long long>(configs[i].partition), diff);
          ok = false;
        }
        std::printf(
            "{\"model\": \"%s\", \"batch\": %lld, \"group\": %lld, \"partition\": %lld, "
            "\"default\": %s, \"fresh\": %s, \"us\": %.2f, \"gbps\": %.0f, "
            "\"max_diff\": %.2g}\n",
            sh.model, static_cast<long long>(batch), static_cast<long long>(configs[i].group),
            static_cast<long long>(configs[i].partition), configs[i].is_default ? "true" : "false",
            configs[i].fresh ? "true" : "false", us, in.layer_bytes / (us * 1e-6) / 1e9, diff);
        std::fflush(stdout);
      }
    }
  }
  return ok ? 0 : 1;
}
