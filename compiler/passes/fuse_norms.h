// Fuses decomposed LayerNorm and RMSNorm subgraphs into LayerNormalization / RMSNormalization.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status fuse_norms(ir::Graph& g);

}  // namespace kiln::compiler
