#include "compiler/passes/fuse_attention.h"

namespace kiln::compiler {

// Placeholder until the pass lands: changes nothing.
Status fuse_attention(ir::Graph& g, const FuseOptions& opts) {
  (void)g;
  (void)opts;
  return Status::ok_status();
}

}  // namespace kiln::compiler
