// Scan family: CumSum along any axis (kernels/scan.cuh through scan_codegen), with `exclusive`
// and `reverse`, the axis a constant input. A forward scan along the size axis is safe with
// padded requests: the real rows are a prefix of the axis, and a prefix sum at a real row reads
// only rows before it. A reverse one would sum the padding into every real row: the padding-taint
// check (compiler/passes/padding_taint.h) stops such a model before lowering.
#include <fmt/format.h>

#include "compiler/backend/lower/lower_rules.h"
#include "compiler/backend/lower/scan_codegen.h"
#include "compiler/ops/op_util.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

bool scannable(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kI32 ||
         t == DType::kI64;
}

// The axis input: one constant integer (constant data or a symbolic constant).
Result<int64_t> scan_axis(const LowerContext& cx, const ir::Node& n) {
  const ir::Value& a = cx.value(n.inputs[1]);
  if (a.constant) {
    KILN_ASSIGN_OR_RETURN(RefTensor t, reference_decode_constant(a));
    if (t.data.size() == 1) return ref_to_int(t.data[0]);
  } else if (a.producer < 0 && a.ints && a.ints->size() == 1 && (*a.ints)[0].is_constant()) {
    return (*a.ints)[0].offset;
  }
  return lower_unsupported(
      n, fmt::format("the axis '{}' is computed at run time; kiln needs a constant axis", a.name));
}

Result<ir::DimExpr> linear_numel(const ir::Node& n, const ir::Shape& s) {
  auto e = ir::shape_numel(s);
  if (!e)
    return lower_unsupported(n, fmt::format("the element count of {} is not linear in the size",
                                            ir::shape_to_string(s)));
  return *e;
}

Result<ScanKernel> cumsum_plan(const LowerContext& cx, const ir::Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  ScanKernel k;
  k.dtype = cx.dtype(x);
  if (!scannable(k.dtype) || cx.dtype(y) != k.dtype)
    return lower_unsupported(n, fmt::format("'{}' is {}; kiln's scan takes f32, f16, bf16, i32 or "
                                            "i64, and returns the same dtype",
                                            cx.value(x).name, dtype_name(k.dtype)));
  const ir::Value& xv = cx.value(x);
  if (xv.producer < 0 && xv.ints && !xv.constant)
    return lower_unsupported(
        n, fmt::format("input '{}' is a symbolic shape value, not a tensor", xv.name));
  const ir::Shape& xs = cx.shape(x);
  KILN_ASSIGN_OR_RETURN(const int64_t attr, scan_axis(cx, n));
  const auto axis = axis_normalize(attr, static_cast<int64_t>(xs.size()));
  if (!axis)
    return invalid_argument(fmt::format("{}: axis {} is out of range for {}",
                                        lower_error_prefix(n), attr, ir::shape_to_string(xs)));
  const auto a = static_cast<size_t>(*axis);
  k.exclusive = n.attr_int("exclusive", 0) != 0;
  k.reverse = n.attr_int("reverse", 0) != 0;
  k.len = xs[a];
  const auto mid = xs.begin() + static_cast<std::ptrdiff_t>(a);
  ir::Shape others(xs.begin(), mid);
  others.insert(others.end(), mid + 1, xs.end());
  KILN_ASSIGN_OR_RETURN(k.inner, linear_numel(n, ir::Shape(mid + 1, xs.end())));
  KILN_ASSIGN_OR_RETURN(k.lines, linear_numel(n, others));
  return k;
}

Status lower_cumsum(LowerContext& cx, int i) {
  const ir::Node& n = cx.node(i);
  KILN_ASSIGN_OR_RETURN(const ScanKernel k, cumsum_plan(cx, n));
  const ScanGeometry g = scan_geometry(k);
  KernelLaunch launch;
  launch.kernel = cx.add_kernel("kiln_cumsum", codegen_scan(k, g));
  launch.args = {KernelArgRef::tensor(cx.resolve(n.inputs[0])),
                 KernelArgRef::tensor(cx.resolve(n.outputs[0])), KernelArgRef::size()};
  launch.work = k.lines;
  launch.work_per_block = g.lines_per_block;
  launch.block = g.block;
  launch.nodes = n.name;
  launch.candidates = scan_candidates(k);
  if (!launch.candidates.empty()) launch.config = scan_geometry_label(g);
  cx.emit(i, std::move(launch));
  return Status::ok_status();
}

}  // namespace

std::vector<LowerRule> scan_rules() { return {{"CumSum", lower_cumsum}}; }

}  // namespace kiln::compiler
