#include "compiler/passes/lower_variants.h"

namespace kiln::compiler {

// Placeholder until the pass lands: changes nothing.
Status lower_variants(ir::Graph& g) {
  (void)g;
  return Status::ok_status();
}

}  // namespace kiln::compiler
