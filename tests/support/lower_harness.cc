#include "tests/support/lower_harness.h"

#include <variant>

#include "compiler/backend/lowering.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/passes/precision.h"

namespace kiln::testing {

Result<compiler::LoweredProgram> lower_model(const OnnxBuilder& b, ir::Graph& g,
                                             compiler::Precision p) {
  compiler::ImportOptions opts{"S", {}};
  opts.max_size = 1024;
  KILN_ASSIGN_OR_RETURN(g, compiler::onnx_import_bytes(b.bytes(), "m", ".", opts));
  KILN_RETURN_IF_ERROR(compiler::front_end_passes(g, 1024));
  KILN_RETURN_IF_ERROR(compiler::precision_lower(g, p));
  compiler::LowerOptions lo;
  lo.precision = p;
  return compiler::lower_graph(g, lo);
}

std::vector<const compiler::KernelLaunch*> kernel_steps(const compiler::LoweredProgram& p) {
  std::vector<const compiler::KernelLaunch*> out;
  for (const auto& s : p.steps)
    if (const auto* k = std::get_if<compiler::KernelLaunch>(&s)) out.push_back(k);
  return out;
}

}  // namespace kiln::testing
