#include "tests/runtime/test_model.h"

#include <cmath>
#include <cstring>
#include <random>

#include "cache/kernel_signature.h"
#include "cache/manifest_io.h"

namespace kiln::runtime::testing {
namespace {

uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

struct WeightsLayout {
  uint64_t w = 0, bias1 = 0, b2 = 0, total = 0;
};

WeightsLayout weights_layout(const TestModelSpec& spec) {
  WeightsLayout l;
  l.bias1 = align256(static_cast<uint64_t>(spec.k * spec.n) * 4);
  l.b2 = align256(l.bias1 + static_cast<uint64_t>(spec.n) * 4);
  l.total = l.b2 + static_cast<uint64_t>(spec.n) * 4;
  return l;
}

schema::DimExpr dim(int64_t coef, int64_t offset) {
  schema::DimExpr d;
  d.set_coef(coef);
  d.set_offset(offset);
  return d;
}

void add_buffer(schema::Manifest* m, const std::string& name, schema::Buffer::Location loc,
                uint64_t offset, std::vector<schema::DimExpr> dims) {
  auto* b = m->add_buffers();
  b->set_name(name);
  b->set_location(loc);
  b->set_offset(offset);
  b->set_dtype(schema::DTYPE_F32);
  for (auto& d : dims) *b->add_dims() = d;
}

void add_io(google::protobuf::RepeatedPtrField<schema::IoBinding>* ios, const schema::Manifest& m,
            const std::string& name, uint32_t buffer, int axis) {
  auto* io = ios->Add();
  io->set_name(name);
  io->set_dtype(schema::DTYPE_F32);
  *io->mutable_dims() = m.buffers(static_cast<int>(buffer)).dims();
  io->set_size_axis(axis);
  io->set_buffer(buffer);
}

void add_buffer_arg(schema::KernelStep* k, uint32_t buffer) { k->add_args()->set_buffer(buffer); }

}  // namespace

std::string test_symbol(const TestModelSpec& spec, const std::string& kernel) {
  using cache::ParamKind;
  const int64_t row = 4 * spec.n;  // bytes of an [S, N] / [N, S] f32 tensor per unit of S
  auto ptr = [](ParamKind k, int64_t coef, int64_t offset) {
    return cache::KernelParam{k, cache::ParamExtent{coef, offset}};
  };
  const cache::KernelParam i64{ParamKind::kI64, std::nullopt};
  const cache::KernelParam f32{ParamKind::kF32, std::nullopt};
  cache::KernelSignature sig;
  if (kernel == "add_bias_relu") {
    sig.params = {ptr(ParamKind::kReadPtr, row, 0), ptr(ParamKind::kReadPtr, 0, row),
                  ptr(ParamKind::kWritePtr, row, 0), i64};
  } else {  // combine
    sig.params = {ptr(ParamKind::kReadPtr, row, 0),
                  ptr(ParamKind::kReadPtr, row, 0),
                  ptr(ParamKind::kWritePtr, row, 0),
                  ptr(ParamKind::kWritePtr, row, 0),
                  f32,
                  i64,
                  i64};
  }
  return cache::kernel_symbol_with_signature(kernel, sig);
}

std::string test_cubin_path(const TestModelSpec& spec) { return "kernels." + spec.arch + ".cubin"; }

std::vector<float> random_floats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

TestWeights test_weights(const TestModelSpec& spec, uint32_t seed) {
  TestWeights t;
  const float scale = 1.0f / std::sqrt(static_cast<float>(spec.k));
  t.w = random_floats(static_cast<size_t>(spec.k * spec.n), seed, -scale, scale);
  t.bias1 = random_floats(static_cast<size_t>(spec.n), seed + 1, -0.5f, 0.5f);
  t.b2 = random_floats(static_cast<size_t>(spec.n), seed + 2, -0.5f, 0.5f);
  const WeightsLayout l = weights_layout(spec);
  t.blob.assign(l.total, 0);
  std::memcpy(t.blob.data() + l.w, t.w.data(), t.w.size() * 4);
  std::memcpy(t.blob.data() + l.bias1, t.bias1.data(), t.bias1.size() * 4);
  std::memcpy(t.blob.data() + l.b2, t.b2.data(), t.b2.size() * 4);
  return t;
}

schema::Manifest test_manifest(const TestModelSpec& spec) {
  schema::Manifest m;
  const int64_t K = spec.k, N = spec.n, max = spec.max_size;
  m.set_format_version(cache::kFormatVersion);
  m.set_model_name("runtime_test_model");
  m.mutable_factors()->set_compiler_version("runtime-test");
  m.mutable_factors()->set_format_version(cache::kFormatVersion);
  m.mutable_factors()->add_targets(spec.arch);
  auto* c = m.mutable_config();
  c->set_size_dim("batch");
  c->set_max_size(spec.max_size);
  c->set_precision("fp32");
  c->add_targets(spec.arch);
  c->set_mode(spec.mode);
  for (uint32_t s : spec.compile_sizes) c->add_compile_sizes(s);
  for (uint32_t s : spec.capture_sizes) c->add_cudagraph_capture_sizes(s);

  // Arena, planned at max_size.
  const auto A = schema::Buffer::LOCATION_ARENA;
  uint64_t off = 0;
  auto next = [&off](int64_t elems) {
    uint64_t at = off;
    off = align256(off + static_cast<uint64_t>(elems) * 4);
    return at;
  };
  add_buffer(&m, "x", A, next(max * K), {dim(1, 0), dim(0, K)});   // 0
  add_buffer(&m, "y", A, next(N * max), {dim(0, N), dim(1, 0)});   // 1
  add_buffer(&m, "h0", A, next(max * N), {dim(1, 0), dim(0, N)});  // 2
  add_buffer(&m, "h1", A, next(max * N), {dim(1, 0), dim(0, N)});  // 3
  add_buffer(&m, "z", A, next(max * N), {dim(1, 0), dim(0, N)});   // 4
  add_buffer(&m, "zt", A, next(N * max), {dim(0, N), dim(1, 0)});  // 5
  m.set_arena_bytes(off);
  const WeightsLayout l = weights_layout(spec);
  const auto W = schema::Buffer::LOCATION_WEIGHTS;
  add_buffer(&m, "W", W, l.w, {dim(0, K), dim(0, N)});  // 6
  add_buffer(&m, "bias1", W, l.bias1, {dim(0, N)});     // 7
  add_buffer(&m, "b2", W, l.b2, {dim(0, N)});           // 8
  m.set_weights_file(kWeightsFile);
  m.set_weights_bytes(l.total);

  add_io(m.mutable_inputs(), m, "x", 0, 0);
  add_io(m.mutable_inputs(), m, "y", 1, 1);
  add_io(m.mutable_outputs(), m, "z", 4, 0);
  add_io(m.mutable_outputs(), m, "zt", 5, 1);

  auto* cubin = m.add_modules()->add_cubins();
  cubin->set_arch(spec.arch);
  cubin->set_path(test_cubin_path(spec));
  const std::string relu = test_symbol(spec, "add_bias_relu");
  auto add_kernel = [&m](const std::string& symbol, uint32_t specialised) {
    auto* k = m.add_kernels();
    k->set_symbol(symbol);
    k->set_module(0);
    k->set_specialised_size(specialised);
  };
  add_kernel(relu, 0);                          // 0
  add_kernel(relu + "_s16", 16);                // 1
  add_kernel(test_symbol(spec, "combine"), 0);  // 2

  auto* g = m.add_pieces()->add_steps()->mutable_gemm();
  g->set_node("gemm0");
  g->set_a(0);
  g->set_b(6);
  g->set_d(2);
  g->set_has_bias(true);
  g->set_bias(7);
  *g->mutable_m() = dim(1, 0);
  *g->mutable_n() = dim(0, N);
  *g->mutable_k() = dim(0, K);
  g->set_alpha(1.0f);
  g->set_epilogue(schema::GEMM_EPILOGUE_BIAS);
  g->set_compute(schema::GEMM_COMPUTE_F32);
  *g->mutable_batch() = dim(0, 1);

  auto* attention = m.add_pieces();
  attention->set_is_attention(true);
  auto* k1 = attention->add_steps()->mutable_kernel();
  k1->set_node("relu1");
  k1->set_kernel(0);
  (*k1->mutable_specialised())[16] = 1;
  *k1->mutable_grid()->mutable_work() = dim(N, 0);
  k1->mutable_grid()->set_work_per_block(256);
  k1->set_block(256);
  add_buffer_arg(k1, 2);
  add_buffer_arg(k1, 8);
  add_buffer_arg(k1, 3);
  k1->add_args()->set_size(true);

  auto* k2 = m.add_pieces()->add_steps()->mutable_kernel();
  k2->set_node("combine2");
  k2->set_kernel(2);
  *k2->mutable_grid()->mutable_work() = dim(N, 0);
  k2->mutable_grid()->set_work_per_block(128);
  k2->set_block(128);
  for (uint32_t b : {3u, 1u, 4u, 5u}) add_buffer_arg(k2, b);
  k2->add_args()->set_f32(spec.alpha);
  k2->add_args()->set_i64(N);
  k2->add_args()->set_size(true);
  return m;
}

void test_manifest_add_files(schema::Manifest* m, const TestModelSpec& spec, uint64_t cubin_size) {
  auto* w = m->add_files();
  w->set_path(kWeightsFile);
  w->set_size(m->weights_bytes());
  w->set_role(schema::FILE_ROLE_WEIGHTS);
  auto* c = m->add_files();
  c->set_path(test_cubin_path(spec));
  c->set_size(cubin_size);
  c->set_role(schema::FILE_ROLE_CUBIN);
}

std::string test_kernel_source(const TestModelSpec& spec) {
  const std::string n = std::to_string(spec.n) + "LL";
  const std::string body =
      "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < S * " +
      n + ") { const float v = x[i] + b[i % " + n +
      "]; "
      "y[i] = v > 0.0f ? v : 0.0f; }\n";
  const std::string relu = test_symbol(spec, "add_bias_relu");
  return "extern \"C\" __global__ void " + relu +
         "(const float* x, const float* b, float* y, long long S) {\n" + body +
         "}\n"
         "extern \"C\" __global__ void " +
         relu + "_s16(const float* x, const float* b, float* y, long long) {\n" +
         "  constexpr long long S = 16;\n" + body +
         "}\n"
         "extern \"C\" __global__ void " +
         test_symbol(spec, "combine") +
         "(const float* h, const float* y, float* z, "
         "float* zt, float alpha, long long n, long long S) {\n"
         "  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
         "  if (i >= S * n) return;\n"
         "  const long long s = i / n, c = i % n;\n"
         "  const float v = __fadd_rn(__fmul_rn(alpha, h[i]), y[c * S + s]);\n"
         "  z[i] = v;\n"
         "  zt[c * S + s] = v;\n"
         "}\n";
}

void test_reference(const TestModelSpec& spec, const TestWeights& w, const std::vector<float>& x,
                    const std::vector<float>& y, int64_t s, std::vector<double>* z,
                    std::vector<double>* zt) {
  const int64_t K = spec.k, N = spec.n;
  z->assign(static_cast<size_t>(s * N), 0.0);
  zt->assign(static_cast<size_t>(s * N), 0.0);
  for (int64_t r = 0; r < s; ++r) {
    for (int64_t c = 0; c < N; ++c) {
      double acc = w.bias1[c];
      for (int64_t i = 0; i < K; ++i) acc += double(x[r * K + i]) * double(w.w[i * N + c]);
      double h1 = acc + w.b2[c];
      h1 = h1 > 0 ? h1 : 0;
      const double v = double(spec.alpha) * h1 + double(y[c * s + r]);
      (*z)[r * N + c] = v;
      (*zt)[c * s + r] = v;
    }
  }
}

}  // namespace kiln::runtime::testing
