// Fuses decomposed rotary embeddings (Slice/Neg/Concat/Mul/Add) into kiln.Rotary, then partial
// ones (a rotary over x[..., :R] concatenated with x[..., R:]) into kiln.Rotary with rotary_dim R.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status fuse_rotary(ir::Graph& g);

}  // namespace kiln::compiler
