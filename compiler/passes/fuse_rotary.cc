#include "compiler/passes/fuse_rotary.h"

namespace kiln::compiler {

// Placeholder until the pass lands: changes nothing.
Status fuse_rotary(ir::Graph& g) {
  (void)g;
  return Status::ok_status();
}

}  // namespace kiln::compiler
