#include "tests/support/gpu_model_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "compiler/pipeline.h"
#include "compiler/reference_interpreter.h"
#include "runtime/executor.h"
#include "runtime/model.h"
#include "tests/support/temp_dir.h"
#include "tools/tensor_io.h"

namespace kiln::testing {

GpuCheck gpu_check(compiler::Precision p, std::vector<int64_t> sizes) {
  GpuCheck c;
  c.precision = p;
  c.sizes = std::move(sizes);
  return c;
}

bool gpu_available(std::string* why) { return cuda_device_available(why); }

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
  config.mode = check.capture_sizes.empty() ? compiler::GraphMode::kNone
                                            : compiler::GraphMode::kFull;
  auto out = compiler::compile_model({path, config, tmp.path() / "cache"});
  if (!out.ok()) return ::testing::AssertionFailure() << "compile: " << out.status().to_string();
  auto reference = compiler::import_canonical(path, config);
  if (!reference.ok())
    return ::testing::AssertionFailure() << "reference import: " << reference.status().to_string();
  auto loaded = Model::load(out->artifact_dir);
  if (!loaded.ok()) return ::testing::AssertionFailure() << "load: " << loaded.status().to_string();
  const Model& m = **loaded;
  const CudaGraphMode mode =
      check.capture_sizes.empty() ? CudaGraphMode::kNone : CudaGraphMode::kFull;
  auto ex = Executor::create(*loaded, ExecutorOptions{mode, check.debug});
  if (!ex.ok()) return ::testing::AssertionFailure() << "executor: " << ex.status().to_string();
  if (report != nullptr) {
    report->kernel_steps = out->kernel_steps;
    report->gemm_steps = out->gemms;
  }
  const compiler::Tolerance tol =
      check.tol_set ? check.tol : compiler::tolerance_elementwise(check.precision);

  for (int64_t s : check.sizes) {
    std::vector<Tensor> inputs;
    std::map<std::string, compiler::RefTensor> ref_in;
    for (const TensorInfo& info : m.inputs()) {
      inputs.push_back(tools::tensor_random(info, s, rng, check.int_high));
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

}  // namespace kiln::testing
