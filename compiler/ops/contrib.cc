// Op family: contrib. (Placeholder until its implementation lands.)
#include "compiler/op_registry.h"

namespace kiln::compiler {

void ops_register_contrib(std::vector<OpDef>& defs) { (void)defs; }

}  // namespace kiln::compiler
