// Fuses the erf and tanh forms of GELU into Gelu (approximate none / tanh).
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status fuse_gelu(ir::Graph& g);

}  // namespace kiln::compiler
