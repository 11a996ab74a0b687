#include "compiler/backend/lower/elementwise_codegen.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "compiler/backend/kernel_codegen.h"

namespace kiln::compiler {
namespace {

struct EwFunction {
  std::string_view onnx_op;
  std::string_view fn;
  int arity;
};
// Plain ops: one ONNX op, one function. Gelu, Clip, Where, Cast, Expand and the variadic
// Max/Min are composed by the lowering (lower_elementwise.cc).
constexpr std::array<EwFunction, 28> kEwFunctions = {{
    {"Add", "add", 2},
    {"Sub", "sub", 2},
    {"Mul", "mul", 2},
    {"Div", "div", 2},
    {"Pow", "pow", 2},
    {"Neg", "neg", 1},
    {"Abs", "abs", 1},
    {"Sqrt", "sqrt", 1},
    {"Reciprocal", "reciprocal", 1},
    {"Exp", "exp", 1},
    {"Log", "log", 1},
    {"Erf", "erf", 1},
    {"Tanh", "tanh", 1},
    {"Sigmoid", "sigmoid", 1},
    {"Relu", "relu", 1},
    {"Sin", "sin", 1},
    {"Cos", "cos", 1},
    {"Equal", "equal", 2},
    {"Less", "less", 2},
    {"LessOrEqual", "less_equal", 2},
    {"Greater", "greater", 2},
    {"GreaterOrEqual", "greater_equal", 2},
    {"And", "and", 2},
    {"Or", "or", 2},
    {"Xor", "xor", 2},
    {"Not", "not", 1},
    {"IsNaN", "is_nan", 1},
    {"Identity", "identity", 1},
}};

// Functions the lowering composes that no single ONNX op names.
struct ExtraFunction {
  std::string_view fn;
  int arity;
};
constexpr std::array<ExtraFunction, 9> kExtraFunctions = {{
    {"max", 2},
    {"min", 2},
    {"clip", 3},
    {"where", 3},
    {"gelu", 1},
    {"gelu_tanh", 1},
    {"leaky_relu", 2},
    {"to_bool", 1},
    {"is_inf", 3},  // x, detect_positive, detect_negative
}};

bool is_int_dtype(DType t) {
  return t == DType::kI64 || t == DType::kI32 || t == DType::kI8 || t == DType::kU8 ||
         t == DType::kBool;
}
EwType type_of(DType t) { return is_int_dtype(t) ? EwType::kInt : EwType::kFloat; }
const char* type_code(EwType t) { return t == EwType::kInt ? "long long" : "float"; }

std::string convert(const std::string& code, EwType from, EwType to) {
  if (from == to) return code;
  if (to == EwType::kInt) return fmt::format("kiln::f32_to_i64({})", code);
  return fmt::format("static_cast<float>({})", code);
}

// Leading 1s stripped: shapes with the same layout ([1, S, 8] and [S, 8]).
ir::Shape strip_leading_ones(const ir::Shape& s) {
  size_t k = 0;
  while (k < s.size() && s[k] == ir::DimExpr::constant(1)) ++k;
  return ir::Shape(s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
}

bool is_single_element(const ir::Shape& s) {
  return std::all_of(s.begin(), s.end(),
                     [](const ir::DimExpr& d) { return d == ir::DimExpr::constant(1); });
}

bool same_layout(const ir::Shape& a, const ir::Shape& b) {
  return strip_leading_ones(a) == strip_leading_ones(b);
}

// The input varies along the output's innermost axis (else it is constant along a row).
bool varies_along_inner(const ir::Shape& in, const ir::Shape& out) {
  return !in.empty() && !out.empty() && in.back() == out.back() &&
         in.back() != ir::DimExpr::constant(1);
}

DType input_dtype(const EwGroup& g, size_t j) {
  return j < g.input_dtypes.size() ? g.input_dtypes[j] : DType::kF32;
}
DType output_dtype(const EwGroup& g, size_t m) {
  return m < g.output_dtypes.size() ? g.output_dtypes[m] : DType::kF32;
}

// Flat index expression of input j's element for output element `i` (numpy broadcast).
// Appends stride constants to `prologue` and sets `needs_coords` when it uses c<axis>.
std::string input_index(size_t j, const ir::Shape& shape, const ir::Shape& out,
                        std::string& prologue, bool& needs_coords) {
  if (same_layout(shape, out)) return "i";
  if (is_single_element(shape)) return "0";
  const size_t rank = shape.size(), out_rank = out.size();
  std::string stride = "1LL";
  std::vector<std::string> terms;
  for (size_t k = rank; k-- > 0;) {
    const size_t axis = out_rank - rank + k;
    if (shape[k] != ir::DimExpr::constant(1)) {
      const std::string name = fmt::format("in{}_st{}", j, k);
      prologue += fmt::format("  const long long {} = {};\n", name, stride);
      terms.push_back(fmt::format("c{} * {}", axis, name));
    }
    stride = fmt::format("{} * {}", stride, dim_code(shape[k]));
  }
  needs_coords = true;
  std::string expr = terms[0];
  for (size_t t = 1; t < terms.size(); ++t) expr += " + " + terms[t];
  return expr;
}

std::string coords_code(const ir::Shape& out, const char* indent) {
  std::string s = fmt::format("{}long long rem = i;\n", indent);
  for (size_t a = out.size(); a-- > 1;)
    s += fmt::format("{}const long long c{} = rem % od{}; rem /= od{};\n", indent, a, a, a);
  s += fmt::format("{}const long long c0 = rem;\n", indent);
  return s;
}

// Operand code and its compute type.
std::pair<std::string, EwType> operand(const EwGroup& g, const EwOperand& o) {
  switch (o.kind) {
    case EwOperand::Kind::kInput:
      return {fmt::format("x{}", o.index), type_of(input_dtype(g, static_cast<size_t>(o.index)))};
    case EwOperand::Kind::kTemp:
      return {fmt::format("t{}", o.index), g.ops[static_cast<size_t>(o.index)].out};
    case EwOperand::Kind::kScalar:
      return {float_literal(o.scalar), EwType::kFloat};
    case EwOperand::Kind::kIntScalar:
      return {fmt::format("{}LL", o.iscalar), EwType::kInt};
    case EwOperand::Kind::kIntExpr:
      return {dim_code(o.expr), EwType::kInt};
  }
  return {"0", EwType::kFloat};
}

std::string wrap_code(const std::string& code, const EwOp& op) {
  if (op.out != EwType::kInt) return code;
  switch (op.wrap) {
    case DType::kI32:
      return fmt::format("kiln::wrap_i32({})", code);
    case DType::kI8:
      return fmt::format("kiln::wrap_i8({})", code);
    case DType::kU8:
      return fmt::format("kiln::wrap_u8({})", code);
    default:
      return code;
  }
}

// The ops and stores of one element, given x<j> already defined. `store(m, value)` writes
// output m.
template <typename Store>
std::string element_code(const EwGroup& g, const char* indent, Store store) {
  std::string s;
  for (size_t t = 0; t < g.ops.size(); ++t) {
    const EwOp& op = g.ops[t];
    std::string args;
    for (size_t k = 0; k < op.args.size(); ++k) {
      auto [code, type] = operand(g, op.args[k]);
      const EwType want = op.fn == "where" && k == 0 ? EwType::kInt : op.in;
      args += (k ? ", " : "") + convert(code, type, want);
    }
    std::string call = fmt::format("kiln::op_{}({})", op.fn, args);
    if (op.fn == "to_bool") call = fmt::format("({} != 0 ? 1LL : 0LL)", args);
    s += fmt::format("{}const {} t{} = {};\n", indent, type_code(op.out), t, wrap_code(call, op));
  }
  for (size_t m = 0; m < g.outputs.size(); ++m) {
    const EwType tt = g.ops[static_cast<size_t>(g.outputs[m])].out;
    const DType od = output_dtype(g, m);
    const std::string ct(kernel_ctype(od));
    const std::string v = fmt::format("t{}", g.outputs[m]);
    const std::string value =
        type_of(od) == EwType::kInt
            ? fmt::format("kiln::ew_store_i<{}>({})", ct, convert(v, tt, EwType::kInt))
            : fmt::format("kiln::ew_store_f<{}>({})", ct, convert(v, tt, EwType::kFloat));
    s += store(m, value);
  }
  return s;
}

std::string load_code(DType d, const std::string& ref) {
  return type_of(d) == EwType::kInt ? fmt::format("kiln::ew_load_i({})", ref)
                                    : fmt::format("kiln::ew_load_f({})", ref);
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
  for (const auto& f : kExtraFunctions)
    if (f.fn == fn) return f.arity;
  return 0;
}

int elementwise_vector_width(const EwGroup& g) {
  size_t narrowest = 8;
  for (size_t j = 0; j < g.inputs.size(); ++j)
    if (!is_single_element(g.inputs[j]))
      narrowest = std::min(narrowest, dtype_size(input_dtype(g, j)));
  for (size_t m = 0; m < g.outputs.size(); ++m)
    narrowest = std::min(narrowest, dtype_size(output_dtype(g, m)));
  if (narrowest == 0) return 1;
  return static_cast<int>(std::min<size_t>(8, 16 / narrowest));
}

EwPath elementwise_path(const EwGroup& g) {
  const int vec = elementwise_vector_width(g);
  if (vec <= 1 || g.out_shape.empty()) return EwPath::kScalar;
  bool flat = true;
  for (const ir::Shape& s : g.inputs) flat &= same_layout(s, g.out_shape) || is_single_element(s);
  if (flat) return EwPath::kFlatVector;
  const ir::DimExpr& inner = g.out_shape.back();
  if (inner.is_constant() && inner.offset % vec == 0) return EwPath::kRowVector;
  return EwPath::kScalar;
}

EwConfig elementwise_default_config(const EwGroup& g) {
  EwConfig c;
  c.vec = elementwise_path(g) == EwPath::kScalar ? 1 : elementwise_vector_width(g);
  return c;
}

std::string elementwise_config_label(const EwConfig& c) {
  return fmt::format("block={} vec={} items={}", c.block, c.vec, c.items);
}

KernelDef codegen_elementwise(const EwGroup& g) {
  return codegen_elementwise(g, elementwise_default_config(g));
}

KernelDef codegen_elementwise(const EwGroup& g, const EwConfig& config) {
  KernelDef def;
  def.max_threads = config.block;
  for (size_t j = 0; j < g.inputs.size(); ++j)
    def.params.push_back(
        fmt::format("const {}* __restrict__ in{}", kernel_ctype(input_dtype(g, j)), j));
  for (size_t m = 0; m < g.outputs.size(); ++m)
    def.params.push_back(
        fmt::format("{}* __restrict__ out{}", kernel_ctype(output_dtype(g, m)), m));

  const ir::Shape& out = g.out_shape;
  std::string prologue;
  std::string numel = "1LL";
  for (size_t a = 0; a < out.size(); ++a) {
    prologue += fmt::format("  const long long od{} = {};\n", a, dim_code(out[a]));
    numel += fmt::format(" * od{}", a);
  }
  prologue += fmt::format("  const long long n = {};\n", numel);
  bool needs_coords = false;
  std::vector<std::string> index;
  for (size_t j = 0; j < g.inputs.size(); ++j)
    index.push_back(input_index(j, g.inputs[j], out, prologue, needs_coords));

  // The scalar loop: every element through its broadcast index (also the flat path's tail).
  auto scalar_loop = [&](const std::string& start) {
    std::string s = fmt::format(
        "  for (long long i = {}; i < n; i += kiln::global_thread_count()) {{\n", start);
    if (needs_coords && !out.empty()) s += coords_code(out, "    ");
    for (size_t j = 0; j < g.inputs.size(); ++j)
      s += fmt::format("    const auto x{} = {};\n", j,
                       load_code(input_dtype(g, j), fmt::format("in{}[{}]", j, index[j])));
    s += element_code(g, "    ", [](size_t m, const std::string& v) {
      return fmt::format("    out{}[i] = {};\n", m, v);
    });
    return s + "  }\n";
  };

  // A narrower vector keeps the path: the width divides the path's, which divides the rows.
  const EwPath path = config.vec <= 1 ? EwPath::kScalar : elementwise_path(g);
  if (path == EwPath::kScalar) {
    def.body = prologue + scalar_loop("kiln::global_thread_index()");
    return def;
  }
  // Vector paths: thread step v handles elements [v*N, v*N + N), all in one row.
  const int vec = config.vec;
  std::string body = prologue;
  body += fmt::format("  const long long nv = n / {};\n", vec);
  body +=
      "  for (long long v = kiln::global_thread_index(); v < nv; "
      "v += kiln::global_thread_count()) {\n";
  body += fmt::format("    const long long i = v * {};\n", vec);
  if (path == EwPath::kRowVector && needs_coords) body += coords_code(out, "    ");
  std::vector<bool> as_vector(g.inputs.size());
  for (size_t j = 0; j < g.inputs.size(); ++j) {
    const std::string ct(kernel_ctype(input_dtype(g, j)));
    as_vector[j] =
        index[j] == "i" || (path == EwPath::kRowVector && varies_along_inner(g.inputs[j], out));
    if (as_vector[j])
      body += fmt::format(
          "    const kiln::Vec<{0}, {1}> a{2} = kiln::load_vec<{0}, {1}>(in{2} + {3});\n", ct, vec,
          j, index[j]);
    else
      body += fmt::format("    const {} a{} = in{}[{}];\n", ct, j, j, index[j]);
  }
  for (size_t m = 0; m < g.outputs.size(); ++m)
    body += fmt::format("    kiln::Vec<{}, {}> r{};\n", kernel_ctype(output_dtype(g, m)), vec, m);
  body += "#pragma unroll\n";
  body += fmt::format("    for (int k = 0; k < {}; ++k) {{\n", vec);
  for (size_t j = 0; j < g.inputs.size(); ++j)
    body += fmt::format("      const auto x{} = {};\n", j,
                        load_code(input_dtype(g, j), as_vector[j] ? fmt::format("a{}.v[k]", j)
                                                                  : fmt::format("a{}", j)));
  body += element_code(g, "      ", [](size_t m, const std::string& v) {
    return fmt::format("      r{}.v[k] = {};\n", m, v);
  });
  body += "    }\n";
  for (size_t m = 0; m < g.outputs.size(); ++m)
    body += fmt::format("    kiln::store_vec<{0}, {1}>(out{2} + i, r{2});\n",
                        kernel_ctype(output_dtype(g, m)), vec, m);
  body += "  }\n";
  if (path == EwPath::kFlatVector)  // the last n % N elements
    body += scalar_loop(fmt::format("nv * {} + kiln::global_thread_index()", vec));
  def.body = std::move(body);
  return def;
}

std::vector<LaunchCandidate> elementwise_candidates(const EwGroup& g) {
  auto work = ir::shape_numel(g.out_shape);
  if (!work) return {};
  const EwConfig def = elementwise_default_config(g);
  std::vector<EwConfig> configs;
  for (uint32_t block : {128u, 512u, 1024u}) configs.push_back({block, def.vec, 1});
  configs.push_back({def.block, def.vec, 4});
  if (def.vec > 1) configs.push_back({def.block, def.vec / 2, 1});
  // Thread steps of the default when the work is a constant (0: it depends on S).
  const int64_t steps = work->coef == 0 ? (work->offset + def.vec - 1) / def.vec : 0;
  std::vector<LaunchCandidate> out;
  for (const EwConfig& c : configs) {
    if (steps > 0) {
      const bool same_blocks = c.vec == def.vec && steps <= std::min(c.block, def.block);
      const bool mostly_idle = c.vec == def.vec && c.block > def.block && 2 * steps <= c.block;
      const bool one_block = c.items > 1 && steps <= c.block;
      if (same_blocks || mostly_idle || one_block) continue;
    }
    LaunchCandidate cand;
    cand.config = elementwise_config_label(c);
    cand.def = codegen_elementwise(g, c);
    cand.work = *work;
    cand.work_per_block = c.block * static_cast<uint32_t>(c.vec) * c.items;
    cand.block = c.block;
    out.push_back(std::move(cand));
  }
  return out;
}

Status emit_elementwise(LowerContext& cx, int node, const EwGroup& group_in,
                        const std::vector<int>& inputs, const std::vector<int>& outputs,
                        const std::string& nodes) {
  EwGroup group = group_in;
  if (group.input_dtypes.empty())
    for (int v : inputs) group.input_dtypes.push_back(cx.dtype(v));
  if (group.output_dtypes.empty())
    for (int v : outputs) group.output_dtypes.push_back(cx.dtype(v));
  for (size_t j = 0; j < group.input_dtypes.size(); ++j)
    if (kernel_ctype(group.input_dtypes[j]).empty())
      return unimplemented(fmt::format("node(s) '{}': input '{}' is {}, which kernels do not store",
                                       nodes, cx.value(inputs[j]).name,
                                       dtype_name(group.input_dtypes[j])));
  for (size_t m = 0; m < group.output_dtypes.size(); ++m)
    if (kernel_ctype(group.output_dtypes[m]).empty())
      return unimplemented(
          fmt::format("node(s) '{}': output '{}' is {}, which kernels do not store", nodes,
                      cx.value(outputs[m]).name, dtype_name(group.output_dtypes[m])));
  auto work = ir::shape_numel(group.out_shape);
  if (!work)
    return unimplemented(fmt::format("node(s) '{}': output shape {} is not linear in the size",
                                     nodes, ir::shape_to_string(group.out_shape)));
  const EwConfig config = elementwise_default_config(group);
  KernelLaunch launch;
  launch.kernel = cx.add_kernel("kiln_ew", codegen_elementwise(group, config));
  for (int v : inputs) launch.args.push_back(KernelArgRef::tensor(cx.resolve(v)));
  for (int v : outputs) launch.args.push_back(KernelArgRef::tensor(cx.resolve(v)));
  launch.args.push_back(KernelArgRef::size());
  launch.work = *work;
  launch.work_per_block = config.block * static_cast<uint32_t>(config.vec) * config.items;
  launch.block = config.block;
  launch.nodes = nodes;
  launch.candidates = elementwise_candidates(group);
  if (!launch.candidates.empty()) launch.config = elementwise_config_label(config);
  cx.emit(node, std::move(launch));
  return Status::ok_status();
}

}  // namespace kiln::compiler
