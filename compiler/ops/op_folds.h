// Ops the front end accepts that never reach the back end: the importer, graph_infer's folding
// or passes/legalize_variants removes or rewrites them before lowering, so they have no lowering
// rule. One table, the only list of them; compiler/ops/kiln_ops.md documents it and the parity
// test (tests/compiler/backend/op_parity_test.cc) requires every registered op to have either a
// lowering rule or an entry here (or in the back end's "not lowered yet" table).
#pragma once

#include <span>
#include <string_view>

namespace kiln::compiler {

struct OpFold {
  std::string_view domain;  // "" (ONNX), "com.microsoft", "kiln"
  std::string_view op;
  std::string_view by;       // the stage that removes or rewrites it
  std::string_view becomes;  // what is left of it for the back end
};

std::span<const OpFold> op_folds();
// nullptr when (domain, op) is not folded; "ai.onnx" is the same as "".
const OpFold* op_fold_find(std::string_view domain, std::string_view op);

}  // namespace kiln::compiler
