// Op family: shape. (Placeholder until its implementation lands.)
#include "compiler/op_registry.h"

namespace kiln::compiler {

void ops_register_shape(std::vector<OpDef>& defs) { (void)defs; }

}  // namespace kiln::compiler
