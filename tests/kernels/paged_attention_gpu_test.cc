// GPU: the paged-attention kernels (kernels/paged_attention.cuh, through
// compiler/backend/lower/paged_attention_codegen) against the float64 CPU reference
// (tests/support/paged_attention_ref). Each case builds a random cache whose blocks are shuffled
// over the pool (scattered, non-contiguous block tables; two rows share a prefix block; every
// unused table entry points far outside the cache, so a read of one faults), rows of 1, 15, 16,
// 17, 500 and 2000 tokens and rows of context 0. Q, K and V are slices of one fused QKV buffer
// (strided reads). Outputs and the split-K workspace are poisoned (0xFF bytes: NaN) before the
// run: every real output must be written, and context-0 rows must come out exactly zero. Every
// cache slot outside the rows' history is NaN, so reading past a context (or a slot the append
// missed) shows in the output. After the append the whole cache must equal, byte for byte, the
// expected one: the new tokens at their slots, nothing written for slot -1 or anywhere else.
// GQA 4:1 and 1:1, f32/f16/bf16 at the end-to-end tolerance of tests/README.md; split-K on and
// off agree within it. With rotary inside the kernels, queries and cached keys are checked
// against rotating them first with kiln.Rotary's reference. The decode route (`fresh`: no
// append launch; the split kernel takes the new keys and values itself and writes them into the
// cache) must give the same cache and outputs.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/paged_attention_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/config.h"
#include "compiler/ops/attention_ref.h"
#include "compiler/reference/reference_compare.h"
#include "compiler/reference/reference_interpreter.h"
#include "tests/support/gpu_model_check.h"
#include "tests/support/paged_attention_ref.h"

namespace kiln::testing {
namespace {

using compiler::AttnKernel;
using compiler::PagedAttnSpec;
using compiler::Precision;
using ir::DimExpr;

constexpr int64_t kBlockSize = 16;
constexpr int64_t kMaxBlocksPerSeq = 128;  // 2048 tokens
constexpr int64_t kNumBlocks = 200;
constexpr int32_t kFarBlock = 1 << 28;  // unused table entries: a read faults

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

Precision precision_of(DType t) {
  return t == DType::kF32 ? Precision::kF32 : t == DType::kF16 ? Precision::kF16 : Precision::kBF16;
}

std::vector<uint8_t> encode(const std::vector<double>& x, DType t) {
  compiler::RefTensor r{t, {static_cast<int64_t>(x.size())}, x};
  auto bytes = compiler::reference_encode(r, t);
  return bytes.ok() ? *bytes : std::vector<uint8_t>{};
}

double half_bits_to_double(uint16_t h) {
  const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? NAN : sign * INFINITY;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

std::vector<double> decode(const std::vector<uint8_t>& b, DType t) {
  std::vector<double> out(b.size() / dtype_size(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::kF32) {
      float f;
      std::memcpy(&f, b.data() + 4 * i, 4);
      out[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, b.data() + 2 * i, 2);
      out[i] = t == DType::kF16 ? half_bits_to_double(h)
                                : std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
    }
  }
  return out;
}

// Random values already representable in `t` (the reference sees what the GPU reads).
std::vector<double> random_values(size_t n, DType t, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> x(n);
  for (double& v : x) v = u(rng);
  return decode(encode(x, t), t);
}

struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(p); }
};

void upload(DeviceBuffer& d, const void* host, size_t bytes) {
  ASSERT_EQ(cudaMalloc(&d.p, bytes), cudaSuccess);
  d.bytes = bytes;
  ASSERT_EQ(cudaMemcpy(d.p, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
}
void poison(DeviceBuffer& d, size_t bytes) {
  ASSERT_EQ(cudaMalloc(&d.p, bytes), cudaSuccess);
  d.bytes = bytes;
  ASSERT_EQ(cudaMemset(d.p, 0xFF, bytes), cudaSuccess);
}
std::vector<uint8_t> download(const DeviceBuffer& d) {
  std::vector<uint8_t> host(d.bytes);
  EXPECT_EQ(cudaMemcpy(host.data(), d.p, d.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

// The spec's kernels compiled for this GPU and loaded.
struct PagedModule {
  cudaLibrary_t lib = nullptr;
  AttnKernel kernels[4];  // append, decode split, decode combine, prefill
  cudaKernel_t fn[4] = {};
  ~PagedModule() {
    if (lib != nullptr) cudaLibraryUnload(lib);
  }
};

// The spec's module, compiled once per source text: the cases of one spec that differ only in
// their inputs or the decode route (an argument) share it.
void load_module(const PagedAttnSpec& s, std::shared_ptr<const PagedModule>& out) {
  // Never destroyed: unloading at exit would run after the CUDA runtime's own teardown.
  static auto* loaded = new std::map<std::string, std::shared_ptr<const PagedModule>>;
  auto m = std::make_shared<PagedModule>();
  m->kernels[0] = compiler::codegen_paged_kv_append(s);
  m->kernels[1] = compiler::codegen_paged_decode_split(s);
  m->kernels[2] = compiler::codegen_paged_decode_combine(s);
  m->kernels[3] = compiler::codegen_paged_prefill(s);
  std::vector<compiler::KernelDef> defs;
  for (int i = 0; i < 4; ++i) {
    m->kernels[i].def.symbol = "paged_test_" + std::to_string(i);
    defs.push_back(m->kernels[i].def);
  }
  const std::string source = compiler::codegen_module_source(defs, {});
  if (auto it = loaded->find(source); it != loaded->end()) {
    out = it->second;
    return;
  }
  int dev = 0;
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  const std::string arch = "sm_" + std::to_string(prop.major) + std::to_string(prop.minor);
  auto cubin = compiler::nvrtc_compile({"paged_test", source, compiler::kernel_headers()}, arch);
  ASSERT_TRUE(cubin.ok()) << cubin.status().to_string();
  CUDA_OK(cudaLibraryLoadData(&m->lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  for (int i = 0; i < 4; ++i)
    CUDA_OK(cudaLibraryGetKernel(&m->fn[i], m->lib, m->kernels[i].def.symbol.c_str()));
  loaded->emplace(source, m);
  out = m;
}

void launch(const PagedModule& m, int i, std::vector<void*> args) {
  const AttnKernel& k = m.kernels[i];
  long long size = 0;  // no dim of these specs depends on S
  args.push_back(&size);
  const dim3 grid(static_cast<unsigned>((k.work.eval(0) + k.work_per_block - 1) / k.work_per_block),
                  static_cast<unsigned>(k.grid_y.eval(0)));
  if (grid.x == 0) return;
  CUDA_OK(cudaLaunchKernel(reinterpret_cast<const void*>(m.fn[i]), grid, dim3(k.block),
                           args.data(), k.shared_bytes, nullptr));
}

// One step: rows with `contexts` tokens (this step's included), `q_len` new tokens each,
// appended then attended (decode when q_len = 1 and `decode`, else prefill).
struct StepCase {
  DType dtype = DType::kF32;
  int64_t d = 64, hq = 8, hkv = 2;
  int64_t q_len = 1;
  bool decode = true;
  int64_t partition = 0;
  std::vector<int32_t> contexts;
  int64_t group = 1;  // decode: query heads per block (a divisor of hq / hkv)
  // Rotary inside the kernels (kiln.PagedAttention with cos/sin): rotary_dim > 0 rotates the
  // first rotary_dim elements of each query and new key by a random table row per token, as
  // kiln.Rotary would: half pairs, interleaved pairs, or a full-width table.
  int64_t rotary_dim = 0;
  bool interleaved = false, full_table = false;
  // Decode: the runtime's decode route with the append in the attention — no append launch;
  // the decode_fresh split kernel reads each row's new key and value from the QKV buffer and
  // writes them into the cache.
  bool fresh = false;
};

struct StepResult {
  std::vector<double> out;  // [rows, q_len, hq, d]
  int64_t checked = 0;      // real output elements compared
};

void run_step(const StepCase& c, uint32_t seed, StepResult* result) {
  std::mt19937 rng(seed);
  const int64_t rows = static_cast<int64_t>(c.contexts.size());
  const int64_t width = (c.hq + 2 * c.hkv) * c.d;  // a fused QKV row
  const int64_t tokens = rows * c.q_len;
  PagedCacheShape shape{kNumBlocks, c.hkv, kBlockSize, c.d, c.d, c.hq, kMaxBlocksPerSeq};

  // Block tables: the pool shuffled and handed out in turn; rows 4 and 5 share their first
  // block (a common prefix); entries past a row's blocks point far outside the cache.
  PagedCache cache;
  std::vector<int32_t> pool(kNumBlocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  size_t next = 0;
  cache.block_tables.assign(rows * kMaxBlocksPerSeq, kFarBlock);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t nblocks = (c.contexts[b] + kBlockSize - 1) / kBlockSize;
    for (int64_t j = 0; j < nblocks; ++j) {
      ASSERT_LT(next, pool.size());
      cache.block_tables[b * kMaxBlocksPerSeq + j] = pool[next++];
    }
  }
  if (rows > 5 && c.contexts[4] > kBlockSize && c.contexts[5] > kBlockSize)
    cache.block_tables[5 * kMaxBlocksPerSeq] = cache.block_tables[4 * kMaxBlocksPerSeq];
  cache.context_lens = c.contexts;
  cache.key = random_values(kNumBlocks * c.hkv * kBlockSize * c.d, c.dtype, rng);
  cache.value = random_values(kNumBlocks * c.hkv * kBlockSize * c.d, c.dtype, rng);
  const std::vector<double> qkv = random_values(tokens * width, c.dtype, rng);
  // Only the rows' history (positions before this step's tokens) holds keys; every other slot
  // is NaN: a read past a row's context, or of a slot the append missed, turns its output NaN.
  std::vector<char> history(kNumBlocks * kBlockSize, 0);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t j = 0; j < c.contexts[b] - c.q_len; ++j)
      history[cache.block_tables[b * kMaxBlocksPerSeq + j / kBlockSize] * kBlockSize +
              j % kBlockSize] = 1;
  for (int64_t blk = 0; blk < kNumBlocks; ++blk)
    for (int64_t h = 0; h < c.hkv; ++h)
      for (int64_t off = 0; off < kBlockSize; ++off) {
        if (history[blk * kBlockSize + off]) continue;
        const int64_t row = paged_row(shape, blk, h, off);
        std::fill_n(cache.key.begin() + row * c.d, c.d, NAN);
        std::fill_n(cache.value.begin() + row * c.d, c.d, NAN);
      }

  // New token i of row b sits at position context - q_len + i; padding rows and positions
  // before 0 write nothing.
  std::vector<int64_t> slots(tokens, -1);
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t i = 0; i < c.q_len; ++i) {
      const int64_t pos = c.contexts[b] - c.q_len + i;
      if (c.contexts[b] == 0 || pos < 0) continue;
      slots[b * c.q_len + i] =
          cache.block_tables[b * kMaxBlocksPerSeq + pos / kBlockSize] * kBlockSize +
          pos % kBlockSize;
    }

  const int64_t rot_width = c.full_table ? c.rotary_dim : c.rotary_dim / 2;
  const std::vector<double> cos_t = random_values(tokens * rot_width, c.dtype, rng);
  const std::vector<double> sin_t = random_values(tokens * rot_width, c.dtype, rng);

  const std::vector<uint8_t> key_bytes = encode(cache.key, c.dtype);
  const std::vector<uint8_t> value_bytes = encode(cache.value, c.dtype);
  const std::vector<uint8_t> qkv_bytes = encode(qkv, c.dtype);
  const size_t es = dtype_size(c.dtype);
  DeviceBuffer d_key, d_value, d_qkv, d_tables, d_lens, d_slots, d_out, d_part, d_cos, d_sin;
  upload(d_key, key_bytes.data(), key_bytes.size());
  upload(d_value, value_bytes.data(), value_bytes.size());
  upload(d_qkv, qkv_bytes.data(), qkv_bytes.size());
  upload(d_tables, cache.block_tables.data(), cache.block_tables.size() * 4);
  upload(d_lens, cache.context_lens.data(), cache.context_lens.size() * 4);
  upload(d_slots, slots.data(), slots.size() * 8);
  poison(d_out, static_cast<size_t>(tokens * c.hq * c.d) * es);
  if (c.rotary_dim > 0) {
    const std::vector<uint8_t> cb = encode(cos_t, c.dtype), sb = encode(sin_t, c.dtype);
    upload(d_cos, cb.data(), cb.size());
    upload(d_sin, sb.data(), sb.size());
  }

  PagedAttnSpec s;
  s.dtype = c.dtype;
  s.Hq = c.hq;
  s.Hkv = c.hkv;
  s.D = s.Dv = c.d;
  s.block_size = kBlockSize;
  s.max_blocks_per_seq = kMaxBlocksPerSeq;
  s.rows = DimExpr::constant(rows);
  s.q_len = DimExpr::constant(c.q_len);
  s.partition = c.partition;
  s.decode_group = c.group;
  // Scores of standard deviation about 1.3 at every head dim: a peaked softmax, so that a
  // wrong or missing key moves the output beyond the tolerance.
  s.scale = 4.0f / std::sqrt(static_cast<float>(c.d));
  compiler::paged_attn_contiguous_strides(s);  // the output
  s.q_ss = s.k_st = s.v_st = DimExpr::constant(width);
  s.q_sb = DimExpr::constant(c.q_len * width);
  s.q_sh = s.k_sh = s.v_sh = DimExpr::constant(c.d);
  s.rotary_dim = c.rotary_dim;
  s.rotary_width = rot_width;
  s.rotary_interleaved = c.interleaved;
  s.rotary_st = DimExpr::constant(rot_width);
  s.decode_fresh = c.decode && c.fresh;  // else the append launch runs
  poison(d_part, static_cast<size_t>(compiler::paged_decode_part_floats(s).eval(0)) * 4);

  std::shared_ptr<const PagedModule> module;
  load_module(s, module);
  if (::testing::Test::HasFatalFailure()) return;
  const PagedModule& m = *module;
  char* base = static_cast<char*>(d_qkv.p);
  void* q = base;
  void* k = base + c.hq * c.d * es;
  void* v = base + (c.hq + c.hkv) * c.d * es;
  std::vector<void*> append = {&k, &v, &d_slots.p, &d_key.p, &d_value.p};
  std::vector<void*> attend = {&q, &d_key.p, &d_value.p, &d_tables.p, &d_lens.p, &d_out.p};
  if (c.rotary_dim > 0)
    for (std::vector<void*>* args : {&append, &attend}) {
      args->push_back(&d_cos.p);
      args->push_back(&d_sin.p);
    }
  if (!s.decode_fresh) launch(m, 0, append);
  if (c.decode) {
    std::vector<void*> split = attend;
    if (c.partition > 0) split.push_back(&d_part.p);
    if (s.decode_fresh)
      for (void* a :
           {static_cast<void*>(&k), static_cast<void*>(&v), static_cast<void*>(&d_slots.p)})
        split.push_back(a);
    launch(m, 1, split);
    if (c.partition > 0) {
      attend.push_back(&d_part.p);
      launch(m, 2, attend);
    }
  } else {
    launch(m, 3, attend);
  }
  CUDA_OK(cudaDeviceSynchronize());

  // The cache: exactly the new tokens at their slots, nothing else touched.
  std::vector<double> new_k(tokens * c.hkv * c.d), new_v(new_k.size()), q_host(tokens * c.hq * c.d);
  for (int64_t t = 0; t < tokens; ++t) {
    const double* row = qkv.data() + t * width;
    std::copy_n(row, c.hq * c.d, q_host.begin() + t * c.hq * c.d);
    std::copy_n(row + c.hq * c.d, c.hkv * c.d, new_k.begin() + t * c.hkv * c.d);
    std::copy_n(row + (c.hq + c.hkv) * c.d, c.hkv * c.d, new_v.begin() + t * c.hkv * c.d);
  }
  if (c.rotary_dim > 0) {  // the reference's rotation, rounded to the dtype as the kernels do
    const compiler::RefTensor cs{c.dtype, {tokens, 1, rot_width}, cos_t};
    const compiler::RefTensor sn{c.dtype, {tokens, 1, rot_width}, sin_t};
    for (auto [x, heads] : {std::pair{&q_host, c.hq}, std::pair{&new_k, c.hkv}}) {
      auto r = compiler::ref_rotary({c.dtype, {tokens, heads, c.d}, *x}, cs, sn, c.rotary_dim,
                                    c.interleaved);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      *x = decode(encode(r->data, c.dtype), c.dtype);
    }
  }
  paged_kv_append_ref(shape, new_k, new_v, slots, cache);
  if (c.rotary_dim > 0) {  // fp32 arithmetic against float64: within a rounding of the dtype
    const std::vector<double> got_key = decode(download(d_key), c.dtype);
    const std::vector<float> got_f(got_key.begin(), got_key.end());
    const compiler::Comparison kc = compiler::compare_with_reference(
        got_f.data(), cache.key, compiler::tolerance_end_to_end(precision_of(c.dtype)));
    EXPECT_TRUE(kc.ok()) << "key cache: " << kc.summary();
  } else {
    EXPECT_TRUE(download(d_key) == encode(cache.key, c.dtype)) << "key cache";
  }
  EXPECT_TRUE(download(d_value) == encode(cache.value, c.dtype)) << "value cache";

  const std::vector<double> ref = paged_attention_ref(shape, cache, q_host, c.q_len, s.scale);
  const std::vector<double> got = decode(download(d_out), c.dtype);
  const int64_t row_elems = c.q_len * c.hq * c.d;
  std::vector<float> got_real;
  std::vector<double> ref_real;
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t i = 0; i < row_elems; ++i) {
      const double g = got[b * row_elems + i];
      if (c.contexts[b] == 0) {
        ASSERT_EQ(g, 0.0) << "context-0 row " << b << " element " << i;
      } else {
        got_real.push_back(static_cast<float>(g));
        ref_real.push_back(ref[b * row_elems + i]);
      }
    }
  }
  const compiler::Comparison cmp = compiler::compare_with_reference(
      got_real.data(), ref_real, compiler::tolerance_end_to_end(precision_of(c.dtype)));
  EXPECT_TRUE(cmp.ok()) << cmp.summary() << " first mismatch at " << cmp.first_mismatch;
  result->out = got;
  result->checked = static_cast<int64_t>(got_real.size());
}

std::string label(const StepCase& c) {
  return std::string(dtype_name(c.dtype)) + " d=" + std::to_string(c.d) +
         " hq=" + std::to_string(c.hq) + " hkv=" + std::to_string(c.hkv) +
         " q_len=" + std::to_string(c.q_len) + " partition=" + std::to_string(c.partition) +
         " group=" + std::to_string(c.group) + (c.fresh ? " decode route" : "");
}

const DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
// Lengths 1, 15, 16, 17, 500, 2000 and two padding rows (0).
const std::vector<int32_t> kDecodeContexts = {1, 0, 15, 16, 500, 2000, 17, 0};

TEST(PagedAttentionGpu, DecodeSplitAndUnsplitMatchReference) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  int64_t checked = 0;
  uint32_t seed = 1;
  for (DType t : kDtypes)
    for (int64_t d : {64, 128})
      for (auto [hq, hkv, group] :
           {std::tuple<int64_t, int64_t, int64_t>{8, 2, 1}, {8, 2, 4}, {4, 4, 1}}) {
        StepCase c{t, d, hq, hkv, 1, true, 0, kDecodeContexts, group};
        // Per partition: the append and the plain kernel, then the fresh kernel alone.
        std::vector<double> outs[4];
        for (int64_t partition : {int64_t{0}, int64_t{64}})
          for (int form = 0; form < 2; ++form) {
            c.partition = partition;
            c.fresh = form == 1;
            SCOPED_TRACE(label(c));
            StepResult r;
            run_step(c, seed, &r);  // the same seed: the same inputs in every form
            if (HasFatalFailure()) return;
            checked += r.checked;
            outs[(partition > 0) * 2 + form] = r.out;
          }
        for (int i = 1; i < 4; ++i) {
          SCOPED_TRACE(label(c) + ": form " + std::to_string(i) + " vs unsplit with append");
          std::vector<float> other(outs[i].begin(), outs[i].end());
          const compiler::Comparison cmp = compiler::compare_with_reference(
              other.data(), outs[0], compiler::tolerance_end_to_end(precision_of(t)));
          EXPECT_TRUE(cmp.ok()) << cmp.summary();
        }
        ++seed;
      }
  // Every real row's output of every case was compared (the tests did run).
  const int64_t real_rows = 6;
  EXPECT_EQ(checked, real_rows * 4 * (3 * (2 * 8 * 64 + 4 * 64 + 2 * 8 * 128 + 4 * 128)));
}

// kiln.PagedAttention with cos/sin: the append rotates each new key before it is cached, the
// decode (split and unsplit, one query head or several per block) and prefill kernels rotate
// each query as they load it; every table form, a partial rotary_dim, GQA.
TEST(PagedAttentionGpu, RotaryInsideTheKernelsMatchesRotatingFirst) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  int64_t checked = 0, cases = 0;
  uint32_t seed = 400;
  for (DType t : kDtypes)
    for (auto [rdim, inter, full] : {std::tuple{int64_t{64}, false, true},
                                     {int64_t{64}, false, false},
                                     {int64_t{64}, true, false},
                                     {int64_t{32}, false, true}}) {
      for (auto [q_len, decode, partition, group, fresh] :
           {std::tuple{int64_t{1}, true, int64_t{0}, int64_t{1}, false},
            {int64_t{1}, true, int64_t{64}, int64_t{4}, false},
            {int64_t{1}, true, int64_t{64}, int64_t{2}, true},
            {int64_t{1}, true, int64_t{0}, int64_t{1}, true},
            {int64_t{16}, false, int64_t{0}, int64_t{1}, false}}) {
        StepCase c{
            t,         64,
            8,         2,
            q_len,     decode,
            partition, decode ? kDecodeContexts : std::vector<int32_t>{16, 0, 17, 5, 500, 33},
            group};
        c.rotary_dim = rdim;
        c.interleaved = inter;
        c.full_table = full;
        c.fresh = fresh;
        SCOPED_TRACE(label(c) + " rotary_dim=" + std::to_string(rdim) +
                     (full    ? " full"
                      : inter ? " interleaved"
                              : " half"));
        StepResult r;
        run_step(c, seed++, &r);
        if (HasFatalFailure()) return;
        checked += r.checked;
        ++cases;
      }
    }
  EXPECT_EQ(cases, 3 * 4 * 5);
  EXPECT_EQ(checked, 3 * 4 * (4 * 6 * 8 * 64 + 5 * 16 * 8 * 64));
}

TEST(PagedAttentionGpu, DecodeSmallHeadDimAndOddPartition) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  int64_t checked = 0;
  for (DType t : kDtypes) {
    // Head dim 16 (half a warp), a partition of 48 tokens (3 blocks); one query head a block,
    // then the four of a kv head.
    for (int64_t group : {1, 4}) {
      StepCase c{t, 16, 8, 2, 1, true, 48, kDecodeContexts, group};
      c.fresh = group == 4;
      SCOPED_TRACE(label(c));
      StepResult r;
      run_step(c, 100, &r);
      if (HasFatalFailure()) return;
      checked += r.checked;
    }
  }
  EXPECT_EQ(checked, 3 * 2 * 6 * 8 * 16);
}

TEST(PagedAttentionGpu, PrefillChunksAreCausalOverTheCache) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  int64_t checked = 0;
  // Chunks of 16 new tokens: a whole first prompt (16), one block and a token (17), a short
  // row whose first 11 queries precede position 0 (5), long contexts, padding rows.
  const std::vector<int32_t> contexts = {16, 0, 17, 5, 500, 2000, 33, 0};
  for (DType t : kDtypes)
    for (auto [d, hq, hkv] : {std::tuple<int64_t, int64_t, int64_t>{64, 8, 2}, {80, 4, 4}}) {
      StepCase c{t, d, hq, hkv, 16, false, 0, contexts};
      SCOPED_TRACE(label(c));
      StepResult r;
      run_step(c, 200, &r);
      if (HasFatalFailure()) return;
      checked += r.checked;
    }
  EXPECT_EQ(checked, 3 * 6 * 16 * (8 * 64 + 4 * 80));
}

TEST(PagedAttentionGpu, AppendOfPaddingRowsOnlyWritesNothing) {
  if (std::string why; !gpu_available(&why)) GTEST_SKIP() << why;
  int64_t steps = 0;
  for (DType t : kDtypes) {
    // Every row a padding row: every slot -1, the cache must keep its bytes (checked in
    // run_step) and every output is zero.
    for (bool fresh : {false, true}) {
      StepCase c{t, 64, 8, 2, 1, true, 64, {0, 0, 0, 0}};
      c.fresh = fresh;
      SCOPED_TRACE(label(c));
      StepResult r;
      run_step(c, 300, &r);
      if (HasFatalFailure()) return;
      EXPECT_EQ(r.checked, 0);
      EXPECT_EQ(r.out.size(), 4u * 8 * 64);
      ++steps;
    }
  }
  EXPECT_EQ(steps, 6);
}

}  // namespace
}  // namespace kiln::testing
