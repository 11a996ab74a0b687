// Layout family: views, transposes, copies, gathers, rotary. (Starting point: the pure views.)
#include <fmt/format.h>

#include "compiler/lower/lower_rules.h"

namespace kiln::compiler {
namespace {

// Reshape, Squeeze, Unsqueeze, Flatten: the output is the input's bytes.
Status lower_view(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  if (cx.is_graph_output(n.outputs[0]))
    return lower_unsupported(n, "a view that is a graph output needs a copy (not yet)");
  cx.alias(n.outputs[0], n.inputs[0]);
  return Status();
}

}  // namespace

std::vector<LowerRule> layout_rules() {
  return {{"Reshape", lower_view}, {"Squeeze", lower_view}, {"Unsqueeze", lower_view},
          {"Flatten", lower_view}};
}

}  // namespace kiln::compiler
