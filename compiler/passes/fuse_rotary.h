// Fuses decomposed rotary embeddings (Slice/Neg/Concat/Mul/Add) into kiln.Rotary.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status fuse_rotary(ir::Graph& g);

}  // namespace kiln::compiler
