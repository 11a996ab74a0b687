// Maps op variants onto the internal op set (compiler/ops/kiln_ops.md): com.microsoft contrib ops
// and the opset-23 Attention / RotaryEmbedding / RMSNormalization forms.
#pragma once

#include "cache/status.h"
#include "compiler/ir.h"

namespace kiln::compiler {

Status lower_variants(ir::Graph& g);

}  // namespace kiln::compiler
