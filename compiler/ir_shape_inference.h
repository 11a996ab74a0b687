// Shape and dtype inference over the IR, for the ops kiln supports. Dims stay symbolic in S.
#pragma once

#include "cache/status.h"
#include "compiler/ir.h"

namespace kiln::ir {

// Sets dtype and shape of every node output from its inputs. Errors name the node, the op and
// the shapes that disagree ("node 'fc1' (MatMul): inner dims 64 and 32 differ").
Status infer_shapes(Graph& g);

// The op_types infer_shapes (and so the whole compiler) understands.
bool op_supported(const std::string& op);

}  // namespace kiln::ir
