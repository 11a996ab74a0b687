// cse: common subexpressions. An ONNX node with the same op, attributes and inputs as an earlier
// one computes the same values (ONNX ops are functions of their inputs, the random ones aside):
// its outputs are replaced by the earlier node's and it goes. Exporters repeat work per layer —
// the dynamo exporter's RotaryEmbedding nodes each compute Cos and Sin of the same positions —
// and every repeat is a launch at run time; after this pass the rotary launches of Q and K also
// see one pair of tables (one launch for both, compiler/backend/lower/lower_layout.cc).
#pragma once

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

Status cse(ir::Graph& g);

}  // namespace kiln::compiler
