// Attention family: kiln.Attention → the prefill and decode kernels. (Not yet.)
#include "compiler/lower/lower_rules.h"

namespace kiln::compiler {

std::vector<LowerRule> attention_rules() { return {}; }

Status attention_absorb_views(LowerContext&) { return Status(); }

}  // namespace kiln::compiler
