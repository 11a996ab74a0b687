#include "compiler/kernel_codegen.h"

#include <fmt/format.h>

#include <array>

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

constexpr std::array<std::string_view, 3> kHeaderNames = {"common.cuh", "elementwise.cuh",
                                                          "softmax.cuh"};

std::string float_literal(float v) {
  // Exact round trip through the bit pattern: no decimal rounding, NaN/Inf safe.
  uint32_t bits;
  static_assert(sizeof bits == sizeof v);
  __builtin_memcpy(&bits, &v, sizeof v);
  return fmt::format("__int_as_float(0x{:08x})", bits);
}

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

std::vector<std::pair<std::string, std::string>> kernel_headers() {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto name : kHeaderNames)
    out.emplace_back(std::string(name), std::string(embedded_file(name)));
  return out;
}

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

std::string dim_code(const ir::DimExpr& d) {
  if (d.is_constant()) return fmt::format("{}LL", d.offset);
  if (d.offset == 0) return fmt::format("({}LL*S)", d.coef);
  return fmt::format("({}LL*S+{}LL)", d.coef, d.offset);
}

KernelDef codegen_elementwise(const std::string& symbol, const EwGroup& group) {
  KernelDef def;
  def.symbol = symbol;
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

KernelDef codegen_softmax(const std::string& symbol, const ir::DimExpr& rows, int64_t cols) {
  KernelDef def;
  def.symbol = symbol;
  def.params = {"const float* __restrict__ x", "float* __restrict__ y"};
  def.body = fmt::format("  kiln::softmax_rows_warp(x, y, {}, {}LL);\n", dim_code(rows), cols);
  return def;
}

std::string specialised_symbol(const std::string& symbol, int64_t size) {
  return fmt::format("{}_s{}", symbol, size);
}

std::string codegen_module_source(const std::vector<KernelDef>& kernels,
                                  const std::vector<int64_t>& specialise_sizes) {
  std::string src = "// generated by kiln — do not edit\n";
  for (auto name : kHeaderNames) src += fmt::format("#include \"{}\"\n", name);
  for (const KernelDef& k : kernels) {
    std::string params;
    for (const auto& p : k.params) params += p + ", ";
    src += fmt::format(
        "\nextern \"C\" __global__ void __launch_bounds__(256) {}({}long long S) {{\n{}}}\n",
        k.symbol, params, k.body);
    for (int64_t s : specialise_sizes) {
      src += fmt::format(
          "\nextern \"C\" __global__ void __launch_bounds__(256) {}({}long long) {{\n"
          "  constexpr long long S = {}LL;\n{}}}\n",
          specialised_symbol(k.symbol, s), params, s, k.body);
    }
  }
  return src;
}

}  // namespace kiln::compiler
