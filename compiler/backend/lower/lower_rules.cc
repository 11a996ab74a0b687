#include "compiler/backend/lower/lower_rules.h"

namespace kiln::compiler {
namespace {

// Keep this short: an entry is a gap in the back end, to be closed by a lowering rule (then the
// parity test requires the entry's removal).
constexpr UnloweredOp kUnlowered[] = {
    {"", "LogSoftmax",
     "no model in tests/models uses it; a log form of kernels/reduce.cuh's softmax_rows"},
    {"", "ScatterND",
     "no model in tests/models uses it; needs a copy then an update launch, and run-time indices "
     "that may write padding rows"},
    {"", "Tile",
     "no model in tests/models uses it (constant Tiles fold); a strided gather like Expand's"},
    {"", "Trilu",
     "no model in tests/models uses it (masks of constant shape fold); an index-compare "
     "elementwise kernel"},
};

}  // namespace

std::vector<LowerRule> lower_rules_all() {
  std::vector<LowerRule> all;
  for (auto family : {gemm_rules, elementwise_rules, reduce_rules, scan_rules, layout_rules,
                      attention_rules})
    for (LowerRule& r : family()) all.push_back(std::move(r));
  return all;
}

std::span<const UnloweredOp> unlowered_ops() { return kUnlowered; }

const UnloweredOp* unlowered_op_find(std::string_view domain, std::string_view op) {
  if (domain == "ai.onnx") domain = "";
  for (const UnloweredOp& u : kUnlowered)
    if (u.domain == domain && u.op == op) return &u;
  return nullptr;
}

}  // namespace kiln::compiler
