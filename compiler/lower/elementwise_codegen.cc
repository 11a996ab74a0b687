#include "compiler/lower/elementwise_codegen.h"

#include <fmt/format.h>

#include <array>

#include "compiler/kernel_codegen.h"

namespace kiln::compiler {
namespace {

struct EwFunction {
  std::string_view onnx_op;
  std::string_view fn;
  int arity;
};
constexpr std::array<EwFunction, 8> kEwFunctions = {{
    {"Add", "add", 2},
    {"Sub", "sub", 2},
    {"Mul", "mul", 2},
    {"Div", "div", 2},
    {"Relu", "relu", 1},
    {"Sigmoid", "sigmoid", 1},
    {"Tanh", "tanh", 1},
    {"Identity", "identity", 1},
}};

std::string operand_code(const EwOperand& o) {
  switch (o.kind) {
    case EwOperand::Kind::kInput:
      return fmt::format("x{}", o.index);
    case EwOperand::Kind::kTemp:
      return fmt::format("t{}", o.index);
    case EwOperand::Kind::kScalar:
      return float_literal(o.scalar);
  }
  return "0";
}

// Index expression into input `j` of `shape`, broadcast (right-aligned) onto `out`.
// Emits any stride constants it needs into `prologue`.
std::string input_index(int j, const ir::Shape& shape, const ir::Shape& out,
                        std::string& prologue) {
  if (shape == out) return "i";
  const size_t rank = shape.size(), out_rank = out.size();
  std::string stride = "1LL";
  std::vector<std::string> terms;
  for (size_t k = rank; k-- > 0;) {
    const size_t axis = out_rank - rank + k;
    const bool broadcast = shape[k] == ir::DimExpr::constant(1);
    if (!broadcast) {
      const std::string name = fmt::format("in{}_st{}", j, k);
      prologue += fmt::format("  const long long {} = {};\n", name, stride);
      terms.push_back(fmt::format("c{} * {}", axis, name));
    }
    stride = fmt::format("{} * {}", stride, dim_code(shape[k]));
  }
  if (terms.empty()) return "0";
  std::string expr = terms[0];
  for (size_t t = 1; t < terms.size(); ++t) expr += " + " + terms[t];
  return expr;
}

}  // namespace

std::string_view ew_function_for_op(std::string_view onnx_op) {
  for (const auto& f : kEwFunctions)
    if (f.onnx_op == onnx_op) return f.fn;
  return {};
}

int ew_function_arity(std::string_view fn) {
  for (const auto& f : kEwFunctions)
    if (f.fn == fn) return f.arity;
  return 0;
}

KernelDef codegen_elementwise(const EwGroup& group) {
  KernelDef def;
  for (size_t j = 0; j < group.inputs.size(); ++j)
    def.params.push_back(fmt::format("const float* __restrict__ in{}", j));
  for (size_t m = 0; m < group.outputs.size(); ++m)
    def.params.push_back(fmt::format("float* __restrict__ out{}", m));

  const ir::Shape& out = group.out_shape;
  std::string prologue, loop;
  std::string numel = "1LL";
  for (size_t a = 0; a < out.size(); ++a) {
    prologue += fmt::format("  const long long od{} = {};\n", a, dim_code(out[a]));
    numel += fmt::format(" * od{}", a);
  }
  prologue += fmt::format("  const long long n = {};\n", numel);

  std::vector<std::string> loads;
  bool needs_coords = false;
  for (size_t j = 0; j < group.inputs.size(); ++j) {
    std::string idx = input_index(static_cast<int>(j), group.inputs[j], out, prologue);
    needs_coords |= idx != "i";
    loads.push_back(fmt::format("    const float x{} = in{}[{}];\n", j, j, idx));
  }
  if (needs_coords && !out.empty()) {
    loop += "    long long rem = i;\n";
    for (size_t a = out.size(); a-- > 1;)
      loop += fmt::format("    const long long c{} = rem % od{}; rem /= od{};\n", a, a, a);
    loop += "    const long long c0 = rem;\n";
  }
  for (const auto& l : loads) loop += l;
  for (size_t t = 0; t < group.ops.size(); ++t) {
    const EwOp& op = group.ops[t];
    std::string args;
    for (size_t k = 0; k < op.args.size(); ++k) args += (k ? ", " : "") + operand_code(op.args[k]);
    loop += fmt::format("    const float t{} = kiln::op_{}({});\n", t, op.fn, args);
  }
  for (size_t m = 0; m < group.outputs.size(); ++m)
    loop += fmt::format("    out{}[i] = t{};\n", m, group.outputs[m]);

  def.body = prologue +
             "  for (long long i = kiln::global_thread_index(); i < n; "
             "i += kiln::global_thread_count()) {\n" +
             loop + "  }\n";
  return def;
}

Status emit_elementwise(LowerContext& cx, int node, const EwGroup& group,
                        const std::vector<int>& inputs, const std::vector<int>& outputs,
                        const std::string& nodes) {
  auto work = ir::shape_numel(group.out_shape);
  if (!work)
    return unimplemented(fmt::format("node(s) '{}': output shape {} is not linear in the size",
                                     nodes, ir::shape_to_string(group.out_shape)));
  KernelLaunch launch;
  launch.kernel = cx.add_kernel("kiln_ew", codegen_elementwise(group));
  for (int v : inputs) launch.args.push_back(KernelArgRef::tensor(cx.resolve(v)));
  for (int v : outputs) launch.args.push_back(KernelArgRef::tensor(cx.resolve(v)));
  launch.args.push_back(KernelArgRef::size());
  launch.work = *work;
  launch.work_per_block = 256;
  launch.block = 256;
  launch.nodes = nodes;
  cx.emit(node, std::move(launch));
  return Status();
}

}  // namespace kiln::compiler
