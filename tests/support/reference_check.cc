#include "tests/support/reference_check.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "compiler/reference/reference_interpreter.h"
#include "tools/tensor_io.h"

namespace kiln::testing {

::testing::AssertionResult run_matches_reference(Executor& ex, const Model& model,
                                                 const ir::Graph& reference, int64_t s,
                                                 compiler::Tolerance tol, std::mt19937& rng) {
  std::vector<Tensor> inputs;
  std::map<std::string, compiler::RefTensor> ref_in;
  for (const TensorInfo& info : model.inputs()) {
    inputs.push_back(tools::tensor_random(info, s, rng));
    ref_in[info.name] = tools::tensor_to_ref(inputs.back());
  }
  auto got = ex.run(inputs);
  if (!got.ok()) return ::testing::AssertionFailure() << "run at size " << s << ": " << got.status().to_string();
  auto want = compiler::reference_run(reference, s, ref_in);
  if (!want.ok()) return ::testing::AssertionFailure() << "reference: " << want.status().to_string();
  if (got->size() != model.outputs().size())
    return ::testing::AssertionFailure() << got->size() << " outputs, expected " << model.outputs().size();
  for (const Tensor& out : *got) {
    auto it = want->find(out.name);
    if (it == want->end()) return ::testing::AssertionFailure() << "unexpected output '" << out.name << "'";
    if (out.shape != it->second.dims)
      return ::testing::AssertionFailure()
             << "output '" << out.name << "' at size " << s << " has shape "
             << fmt::format("{}", fmt::join(out.shape, "x")) << ", reference "
             << fmt::format("{}", fmt::join(it->second.dims, "x"));
    const std::vector<double> got_values = tools::tensor_to_ref(out).data;
    const std::vector<float> got_f(got_values.begin(), got_values.end());
    const auto cmp = compiler::compare_with_reference(got_f.data(), it->second.data, tol);
    if (!cmp.ok())
      return ::testing::AssertionFailure()
             << "output '" << out.name << "' at size " << s << ": " << cmp.summary()
             << "; first at " << cmp.first_mismatch << ": got " << got_f[cmp.first_mismatch]
             << ", reference " << it->second.data[cmp.first_mismatch];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
