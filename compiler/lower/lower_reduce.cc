// Row-reduction family. (Starting point moved from lowering.cc: last-axis f32 Softmax.)
#include <fmt/format.h>

#include "compiler/kernel_codegen.h"
#include "compiler/lower/lower_rules.h"

namespace kiln::compiler {
namespace {

constexpr uint32_t kSoftmaxRowsPerBlock = 8;  // 256 threads, a warp per row

Status lower_softmax(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  for (int v : n.inputs)
    if (cx.dtype(v) != DType::kF32) return lower_unsupported(n, "only f32 is supported");
  const ir::Shape& s = cx.shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  if (rank == 0 || axis != rank - 1)
    return lower_unsupported(n, fmt::format("only the last axis is supported, got axis {} of {}",
                                            axis, ir::shape_to_string(s)));
  if (!s.back().is_constant())
    return invalid_argument(fmt::format(
        "{}: the size dimension is the softmax axis ({}); padded requests would mix padding "
        "into real results",
        lower_error_prefix(n), ir::shape_to_string(s)));
  auto rows = ir::shape_numel(ir::Shape(s.begin(), s.end() - 1));
  if (!rows) return lower_unsupported(n, "rows not linear in the size");
  KernelDef def;
  def.params = {"const float* __restrict__ x", "float* __restrict__ y"};
  def.body = fmt::format("  kiln::softmax_rows_warp(x, y, {}, {}LL);\n", dim_code(*rows),
                         s.back().offset);
  KernelLaunch launch;
  launch.kernel = cx.add_kernel("kiln_softmax", std::move(def));
  launch.args = {KernelArgRef::tensor(cx.resolve(n.inputs[0])),
                 KernelArgRef::tensor(cx.resolve(n.outputs[0])), KernelArgRef::size()};
  launch.work = *rows;
  launch.work_per_block = kSoftmaxRowsPerBlock;
  launch.block = 32 * kSoftmaxRowsPerBlock;
  launch.nodes = n.name;
  cx.emit(i, std::move(launch));
  return Status();
}

}  // namespace

std::vector<LowerRule> reduce_rules() { return {{"Softmax", lower_softmax}}; }

}  // namespace kiln::compiler
