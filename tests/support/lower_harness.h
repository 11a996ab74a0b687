// Lowering a model built in a test, as the pipeline does up to the lowered program: import (size
// dim "S", max_size 1024), front end, precision pass, lower_graph. For the lowering tests.
#pragma once

#include <vector>

#include "cache/status.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/config.h"
#include "compiler/ir/ir.h"
#include "tests/support/onnx_builder.h"

namespace kiln::testing {

// `g` receives the lowered graph (the program's value ids refer to it).
Result<compiler::LoweredProgram> lower_model(const OnnxBuilder& b, ir::Graph& g,
                                             compiler::Precision p = compiler::Precision::kF32);

// The kernel launches of `p`, in order (GEMM steps left out).
std::vector<const compiler::KernelLaunch*> kernel_steps(const compiler::LoweredProgram& p);

}  // namespace kiln::testing
