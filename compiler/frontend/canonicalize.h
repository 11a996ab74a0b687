// Canonicalisation: removes inference no-ops (Identity, Dropout) by rewiring their consumers,
// keeping one only where its output is a graph output (the output's name must survive), and
// drops nodes whose results nothing uses.
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status canonicalize(ir::Graph& g);

}  // namespace kiln::compiler
