// Bandwidth benchmark of the elementwise and row-reduction kernels (not a test; needs a GPU).
//
//   build/tests/kernels/bench_bandwidth            # all cases
//
// Measures device copy bandwidth (cudaMemcpyAsync device to device of 256 MiB, counted as read
// plus write, median of 20), then for each case builds a small model, lowers it with kiln
// (import, front end, lowering), generates and NVRTC-compiles the module for this GPU's arch,
// loads it with cudaLibraryLoadData and times the single generated kernel with CUDA events:
// warm-up first, median of 30 launches rotating 2 input sets. Effective bandwidth = bytes of
// every tensor the launch reads or writes / time. Prints a table and one summary line per kernel.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lowering.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/precision.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/median.h"
#include "tests/support/onnx_builder.h"

namespace {

using kiln::DType;
using kiln::runtime::median;
using kiln::testing::OnnxBuilder;
namespace compiler = kiln::compiler;
namespace ir = kiln::ir;

constexpr int kRepeats = 30;
constexpr int kSets = 2;
constexpr int kCols = 4096;

bool cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_bandwidth: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
#define CHECK_CUDA(call) \
  if (!cuda_ok((call), #call)) return false

// Device-to-device copy of 256 MiB: GB/s counting the read and the write.
bool copy_bandwidth(double* gbs) {
  const size_t bytes = size_t{256} << 20;
  void *a = nullptr, *b = nullptr;
  CHECK_CUDA(cudaMalloc(&a, bytes));
  CHECK_CUDA(cudaMalloc(&b, bytes));
  CHECK_CUDA(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) {
    CHECK_CUDA(cudaEventRecord(e0));
    CHECK_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  *gbs = 2.0 * static_cast<double>(bytes) / (median(ms) * 1e-3) / 1e9;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return true;
}

struct Case {
  std::string name;
  int elem;      // onnx element type of inputs, weights and outputs
  int64_t rows;  // S, chosen so that one [S, 4096] tensor is 64 MiB
  OnnxBuilder model;
};

// A weight of dtype `elem`: f32 initializer and a Cast the importer folds.
void weight(OnnxBuilder& b, const std::string& name, int elem, float lo, float hi) {
  b.random_initializer(name + "_f32", {kCols}, lo, hi, 3);
  b.node("Cast", {name + "_f32"}, {name}, {{"to", int64_t{elem}}});
}

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::vector<kiln::testing::Dim> shape = {std::string("S"), int64_t{kCols}};
  for (auto [elem, dname, rows] : {std::tuple{int{onnx::TensorProto::FLOAT}, "f32", 4096},
                                   std::tuple{int{onnx::TensorProto::FLOAT16}, "f16", 8192}}) {
    {
      OnnxBuilder b("ew_chain", 20);
      b.typed_input("x", elem, shape).typed_input("y", elem, shape);
      weight(b, "w", elem, -1.0f, 1.0f);
      b.node("Add", {"x", "w"}, {"a"})
          .node("Mul", {"a", "y"}, {"m"})
          .node("Gelu", {"m"}, {"g"})
          .typed_output("g", elem);
      out.push_back({fmt::format("Add+Mul+Gelu {}", dname), elem, rows, b});
    }
    {
      OnnxBuilder b("ln", 18);
      b.typed_input("x", elem, shape);
      weight(b, "g", elem, 0.5f, 1.5f);
      weight(b, "b", elem, -1.0f, 1.0f);
      b.node("LayerNormalization", {"x", "g", "b"}, {"y"}).typed_output("y", elem);
      out.push_back({fmt::format("LayerNormalization {}", dname), elem, rows, b});
    }
    {
      OnnxBuilder b("rms", 23);
      b.typed_input("x", elem, shape);
      weight(b, "g", elem, 0.5f, 1.5f);
      b.node("RMSNormalization", {"x", "g"}, {"y"}).typed_output("y", elem);
      out.push_back({fmt::format("RMSNormalization {}", dname), elem, rows, b});
    }
    {
      OnnxBuilder b("res_ln", 18);
      b.typed_input("x", elem, shape).typed_input("r", elem, shape);
      weight(b, "g", elem, 0.5f, 1.5f);
      weight(b, "b", elem, -1.0f, 1.0f);
      b.node("Add", {"x", "r"}, {"sum"}).typed_output("sum", elem);
      b.node("LayerNormalization", {"sum", "g", "b"}, {"y"}).typed_output("y", elem);
      out.push_back({fmt::format("Add+LayerNorm (sum kept) {}", dname), elem, rows, b});
    }
  }
  return out;
}

struct Result {
  std::string name, symbol;
  double bytes = 0, us = 0, gbs = 0;
};

// Device buffer of value `v` at size S, filled with random data or the constant's bytes.
bool make_buffer(const ir::Value& v, int64_t s, std::mt19937& rng, void** out, size_t* bytes) {
  auto numel = ir::shape_numel(v.shape);
  if (!numel) return false;
  *bytes = static_cast<size_t>(numel->eval(s)) * kiln::dtype_size(v.dtype);
  CHECK_CUDA(cudaMalloc(out, std::max<size_t>(*bytes, 256)));
  std::vector<uint8_t> host;
  if (v.constant) {
    host = v.constant->bytes;
  } else {
    compiler::RefTensor t;
    t.dtype = v.dtype;
    t.dims = {numel->eval(s)};
    t.data.resize(static_cast<size_t>(t.dims[0]));
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (double& x : t.data) x = u(rng);
    auto enc = compiler::reference_encode(t, v.dtype);
    if (!enc.ok()) return false;
    host = std::move(*enc);
  }
  if (host.size() != *bytes) return false;
  CHECK_CUDA(cudaMemcpy(*out, host.data(), *bytes, cudaMemcpyHostToDevice));
  return true;
}

bool run_case(const Case& c, const std::string& arch, std::vector<Result>& results) {
  compiler::ImportOptions opts{"S", {}};
  opts.max_size = c.rows;
  auto g = compiler::onnx_import_bytes(c.model.bytes(), c.name, ".", opts);
  if (!g.ok())
    return std::fprintf(stderr, "%s: %s\n", c.name.c_str(), g.status().to_string().c_str()), false;
  auto st = compiler::front_end_passes(*g, c.rows);
  if (st.ok()) st = compiler::precision_lower(*g, compiler::Precision::kF32);
  if (!st.ok())
    return std::fprintf(stderr, "%s: %s\n", c.name.c_str(), st.to_string().c_str()), false;
  auto prog = compiler::lower_graph(*g);
  if (!prog.ok())
    return std::fprintf(stderr, "%s: %s\n", c.name.c_str(), prog.status().to_string().c_str()),
           false;
  std::vector<const compiler::KernelLaunch*> launches;
  for (const auto& step : prog->steps)
    if (const auto* k = std::get_if<compiler::KernelLaunch>(&step)) launches.push_back(k);
  if (launches.size() != 1 || prog->steps.size() != 1)
    std::fprintf(stderr, "%s: %zu steps (expected one kernel); timing the first\n", c.name.c_str(),
                 prog->steps.size());
  if (launches.empty()) return false;
  const compiler::KernelLaunch& launch = *launches[0];
  const compiler::KernelDef& def = prog->kernels[static_cast<size_t>(launch.kernel)];
  compiler::NvrtcModule module{"bench", compiler::codegen_module_source(prog->kernels, {c.rows}),
                               compiler::kernel_headers()};
  auto cubin = compiler::nvrtc_compile(module, arch);
  if (!cubin.ok())
    return std::fprintf(stderr, "%s: %s\n", c.name.c_str(), cubin.status().to_string().c_str()),
           false;
  cudaLibrary_t lib = nullptr;
  CHECK_CUDA(cudaLibraryLoadData(&lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0));

  // Buffers: kSets copies of every tensor argument.
  std::mt19937 rng(17);
  const int64_t s = c.rows;
  std::vector<std::vector<void*>> ptrs(kSets);
  double bytes = 0;
  for (int set = 0; set < kSets; ++set)
    for (const auto& a : launch.args) {
      if (a.kind != compiler::KernelArgRef::Kind::kValue) continue;
      void* p = nullptr;
      size_t n = 0;
      if (!make_buffer(g->values[a.value], s, rng, &p, &n)) return false;
      ptrs[set].push_back(p);
      if (set == 0) bytes += static_cast<double>(n);
    }
  const int64_t work = launch.work.eval(s);
  const dim3 grid(static_cast<unsigned>((work + launch.work_per_block - 1) / launch.work_per_block),
                  static_cast<unsigned>(launch.grid_y.eval(s)));
  const dim3 block(launch.block);
  if (launch.shared_bytes > 48 * 1024) return false;  // none of these kernels needs it

  for (bool specialised : {true, false}) {
    const std::string symbol =
        specialised ? compiler::specialised_symbol(def.symbol, c.rows) : def.symbol;
    cudaKernel_t kernel = nullptr;
    CHECK_CUDA(cudaLibraryGetKernel(&kernel, lib, symbol.c_str()));
    const void* fn = reinterpret_cast<const void*>(kernel);
    auto launch_set = [&](int set) {
      std::vector<void*> slots;  // argument values, then pointers to them
      std::vector<int64_t> i64s(launch.args.size());
      std::vector<float> f32s(launch.args.size());
      std::vector<void*> vals(launch.args.size());
      size_t t = 0;
      for (size_t j = 0; j < launch.args.size(); ++j) {
        const auto& a = launch.args[j];
        switch (a.kind) {
          case compiler::KernelArgRef::Kind::kValue:
            vals[j] = ptrs[set][t++];
            slots.push_back(&vals[j]);
            break;
          case compiler::KernelArgRef::Kind::kSize:
            i64s[j] = s;
            slots.push_back(&i64s[j]);
            break;
          case compiler::KernelArgRef::Kind::kI64:
            i64s[j] = a.i64;
            slots.push_back(&i64s[j]);
            break;
          case compiler::KernelArgRef::Kind::kF32:
            f32s[j] = a.f32;
            slots.push_back(&f32s[j]);
            break;
          case compiler::KernelArgRef::Kind::kRealSize:  // attention only, not benchmarked here
          case compiler::KernelArgRef::Kind::kKv:
            return cudaErrorInvalidValue;
        }
      }
      return cudaLaunchKernel(fn, grid, block, slots.data(), launch.shared_bytes, nullptr);
    };
    for (int i = 0; i < 3; ++i) CHECK_CUDA(launch_set(i % kSets));
    CHECK_CUDA(cudaDeviceSynchronize());
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    std::vector<double> ms;
    for (int i = 0; i < kRepeats; ++i) {
      CHECK_CUDA(cudaEventRecord(e0));
      CHECK_CUDA(launch_set(i % kSets));
      CHECK_CUDA(cudaEventRecord(e1));
      CHECK_CUDA(cudaEventSynchronize(e1));
      float t = 0;
      CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    CHECK_CUDA(cudaGetLastError());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    Result r;
    r.name = c.name + (specialised ? " [S const]" : " [S arg]");
    r.symbol = symbol;
    r.bytes = bytes;
    r.us = median(ms) * 1e3;
    r.gbs = bytes / (r.us * 1e-6) / 1e9;
    results.push_back(r);
  }
  for (auto& set : ptrs)
    for (void* p : set) cudaFree(p);
  cudaLibraryUnload(lib);
  return true;
}

}  // namespace

int main() {
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::fprintf(stderr, "bench_bandwidth: no CUDA device\n");
    return 1;
  }
  const std::string arch = fmt::format("sm_{}{}", prop.major, prop.minor);
  double copy = 0;
  if (!copy_bandwidth(&copy)) return 1;
  fmt::print(
      "device {} ({}), copy bandwidth (D2D 256 MiB, read+write, median of 20): {:.0f} GB/s\n",
      prop.name, arch, copy);
  std::vector<Result> results;
  bool ok = true;
  for (const Case& c : cases()) ok &= run_case(c, arch, results);
  fmt::print("\n{:<44} {:>10} {:>10} {:>9} {:>8}\n", "kernel ([S, 4096], one tensor 64 MiB)",
             "MB moved", "median us", "GB/s", "% copy");
  for (const Result& r : results)
    fmt::print("{:<44} {:>10.1f} {:>10.1f} {:>9.0f} {:>7.1f}%\n", r.name, r.bytes / 1e6, r.us,
               r.gbs, 100.0 * r.gbs / copy);
  fmt::print("\n");
  for (const Result& r : results)
    fmt::print("bench_bandwidth: {}: {:.0f} GB/s = {:.1f}% of copy ({})\n", r.name, r.gbs,
               100.0 * r.gbs / copy, r.symbol);
  return ok ? 0 : 1;
}
