#include "tests/support/gpu_model_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <map>

#include "compiler/pipeline.h"
#include "compiler/reference/reference_interpreter.h"
#include "kiln/executor.h"
#include "kiln/model.h"
#include "tests/support/temp_dir.h"
#include "tools/tensor_io.h"

namespace kiln::testing {

GpuCheck gpu_check(compiler::Precision p, std::vector<int64_t> sizes) {
  GpuCheck c;
  c.precision = p;
  c.sizes = std::move(sizes);
  return c;
}

bool gpu_available(std::string* why) {
  if (cuda_device_available(why)) return true;
  // Every device skip says "no CUDA device" (KILN_REQUIRE_GPU=1 looks for it: test_main.cc).
  if (why != nullptr) *why = "no CUDA device: " + *why;
  return false;
}

namespace {

// f32 inputs rounded to what the compiled model computes with (fp16/bf16 storage, tf32 GEMM
// operands), so the reference sees the same inputs and the check measures the kernels' error,
// not the rounding at the model's boundary Cast.
Tensor round_to_compute(Tensor t, compiler::Precision p) {
  if (t.dtype != DType::kF32 || p == compiler::Precision::kF32) return t;
  compiler::RefTensor r = tools::tensor_to_ref(t);
  if (p == compiler::Precision::kTF32) {
    for (double& x : r.data) {  // 10 mantissa bits, round to nearest even
      float f = static_cast<float>(x);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
      std::memcpy(&f, &u, 4);
      x = f;
    }
  } else {
    const DType cd = p == compiler::Precision::kF16 ? DType::kF16 : DType::kBF16;
    auto bytes = compiler::reference_encode(r, cd);
    if (!bytes.ok()) return t;
    ir::Value v;
    v.dtype = cd;
    v.constant = ir::Constant{r.dims, std::move(*bytes)};
    auto back = compiler::reference_decode_constant(v);
    if (!back.ok()) return t;
    r.data = back->data;
  }
  r.dtype = DType::kF32;
  auto f32 = compiler::reference_encode(r, DType::kF32);
  if (f32.ok()) t.data = std::move(*f32);
  return t;
}

}  // namespace

::testing::AssertionResult gpu_model_matches_reference(const OnnxBuilder& model,
                                                       const GpuCheck& check, std::mt19937& rng,
                                                       GpuCheckReport* report) {
  TempDir tmp;
  const auto path = tmp.path() / "model.onnx";
  model.save(path);
  compiler::CompileConfig config;
  config.size_dim = check.size_dim;
  config.max_size = check.max_size;
  config.precision = check.precision;
  config.compile_sizes = check.compile_sizes;
  config.capture_sizes = check.capture_sizes;
  if (check.skinny_gemm_max_m >= 0) config.skinny_gemm_max_m = check.skinny_gemm_max_m;
  config.autotune = check.autotune ? compiler::AutotuneMode::kOn : compiler::AutotuneMode::kOff;
  const CudaGraphMode mode =
      check.capture_sizes.empty() ? CudaGraphMode::kNone : CudaGraphMode::kFull;
  config.mode = mode;
  compiler::CompileRequest request{path, config, tmp.path() / "cache"};
  request.force_candidate = check.candidate;
  auto out = compiler::compile_model(request);
  if (!out.ok()) return ::testing::AssertionFailure() << "compile: " << out.status().to_string();
  auto reference = compiler::import_canonical(path, config);
  if (!reference.ok())
    return ::testing::AssertionFailure() << "reference import: " << reference.status().to_string();
  auto loaded = Model::load(out->artifact_dir);
  if (!loaded.ok()) return ::testing::AssertionFailure() << "load: " << loaded.status().to_string();
  const Model& m = **loaded;
  auto ex = Executor::create(*loaded, ExecutorOptions{mode, check.debug});
  if (!ex.ok()) return ::testing::AssertionFailure() << "executor: " << ex.status().to_string();
  if (report != nullptr) {
    report->kernel_steps = out->kernel_steps;
    report->gemm_steps = out->gemms;
    report->skinny_gemms = out->skinny_gemms;
    report->tuned_launches = out->tuned_launches;
  }
  const compiler::Tolerance tol =
      check.tol_set ? check.tol : compiler::tolerance_elementwise(check.precision);

  for (int64_t s : check.sizes) {
    std::vector<Tensor> inputs;
    std::map<std::string, compiler::RefTensor> ref_in;
    for (const TensorInfo& info : m.inputs()) {
      inputs.push_back(round_to_compute(tools::tensor_random(info, s, rng, check.int_high),
                                        check.precision));
      ref_in[info.name] = tools::tensor_to_ref(inputs.back());
    }
    auto got = (*ex)->run(inputs);
    if (!got.ok())
      return ::testing::AssertionFailure() << "run at size " << s << ": " << got.status().to_string();
    auto want = compiler::reference_run(*reference, s, ref_in);
    if (!want.ok())
      return ::testing::AssertionFailure() << "reference at size " << s << ": "
                                           << want.status().to_string();
    for (const Tensor& o : *got) {
      auto it = want->find(o.name);
      if (it == want->end())
        return ::testing::AssertionFailure() << "unexpected output '" << o.name << "'";
      if (o.shape != it->second.dims)
        return ::testing::AssertionFailure()
               << "output '" << o.name << "' at size " << s << ": shape "
               << fmt::format("{}", fmt::join(o.shape, "x")) << ", reference "
               << fmt::format("{}", fmt::join(it->second.dims, "x"));
      const std::vector<double> g = tools::tensor_to_ref(o).data;
      const std::vector<float> gf(g.begin(), g.end());
      const auto cmp = compiler::compare_with_reference(gf.data(), it->second.data, tol);
      if (report != nullptr)
        report->detail += fmt::format("size {} '{}': {}\n", s, o.name, cmp.summary());
      if (!cmp.ok())
        return ::testing::AssertionFailure()
               << "output '" << o.name << "' at size " << s << " ("
               << compiler::precision_name(check.precision) << "): " << cmp.summary()
               << "; first at " << cmp.first_mismatch << ": got " << gf[cmp.first_mismatch]
               << ", reference " << it->second.data[cmp.first_mismatch];
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult compiles_with_candidate(const OnnxBuilder& model, int candidate,
                                                   compiler::CompileOutcome* outcome) {
  TempDir tmp;
  const auto path = tmp.path() / "model.onnx";
  model.save(path);
  compiler::CompileRequest req;
  req.model = path;
  req.config.size_dim = "S";
  req.config.max_size = 1024;
  req.config.compile_sizes = {1, 17};
  req.config.autotune = compiler::AutotuneMode::kOff;
  req.config.mode = CudaGraphMode::kNone;
  req.cache_root = tmp.path() / "cache";
  req.force_candidate = candidate;
  auto out = compiler::compile_model(req);
  if (!out.ok()) return ::testing::AssertionFailure() << "compile: " << out.status().to_string();
  *outcome = *out;
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
