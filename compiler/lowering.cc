#include "compiler/lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "compiler/kernel_codegen.h"

namespace kiln::compiler {
namespace {

class Lowerer {
 public:
  explicit Lowerer(ir::Graph& g) : g_(g), done_(g.nodes.size(), false) {
    consumers_.resize(g.values.size());
    for (size_t i = 0; i < g.nodes.size(); ++i)
      for (int in : g.nodes[i].inputs)
        if (in >= 0) consumers_[in].push_back(static_cast<int>(i));
    is_output_.assign(g.values.size(), false);
    for (int v : g.outputs) is_output_[v] = true;
  }

  Result<LoweredProgram> run() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (done_[i]) continue;
      const ir::Node& n = g_.nodes[i];
      Status s;
      if (all_outputs_constant(n)) {
        s = Status();  // folded by the importer; its value lives in the weights
      } else if (n.op == "MatMul" || n.op == "Gemm") {
        s = lower_gemm(static_cast<int>(i));
      } else if (n.op == "Softmax") {
        s = lower_softmax(static_cast<int>(i));
      } else if (!ew_function_for_op(n.op).empty()) {
        s = lower_elementwise(static_cast<int>(i));
      } else {
        s = unimplemented(
            fmt::format("node '{}' ({}): no lowering for this op yet", n.name, n.qualified_op()));
      }
      if (!s.ok()) return s;
      done_[i] = true;
    }
    return std::move(prog_);
  }

 private:
  bool all_outputs_constant(const ir::Node& n) const {
    for (int o : n.outputs)
      if (o >= 0 && !g_.values[o].constant) return false;
    return !n.outputs.empty();
  }
  const ir::Shape& shape(int v) const { return g_.values[v].shape; }
  bool is_f32(int v) const { return g_.values[v].dtype == DType::kF32; }
  bool available_at(int v, int node) const {  // computed before `node` runs
    return g_.values[v].producer < node;
  }
  // The single consumer of `v` that is still to be lowered, when `v` is not a graph output.
  int sole_consumer(int v) const {
    if (is_output_[v] || consumers_[v].size() != 1) return -1;
    return done_[consumers_[v][0]] ? -1 : consumers_[v][0];
  }

  Status require_f32(const ir::Node& n) const {
    for (int v : n.inputs)
      if (v >= 0 && !is_f32(v))
        return unimplemented(fmt::format("node '{}' ({}): tensor '{}' is {}; only f32 is supported",
                                         n.name, n.op, g_.values[v].name,
                                         dtype_name(g_.values[v].dtype)));
    return Status();
  }

  int new_value(const std::string& name, ir::Shape shape, std::optional<ir::Constant> c) {
    ir::Value v;
    v.name = name;
    v.dtype = DType::kF32;
    v.shape = std::move(shape);
    v.constant = std::move(c);
    int id = g_.add_value(std::move(v));
    consumers_.emplace_back();
    is_output_.push_back(false);
    return id;
  }

  // A bias-like operand for an epilogue: shape [N] or [1, N], available before the GEMM.
  bool bias_like(int v, const ir::DimExpr& n, int gemm_node) const {
    const ir::Shape& s = shape(v);
    bool fits = (s.size() == 1 && s[0] == n) ||
                (s.size() == 2 && s[0] == ir::DimExpr::constant(1) && s[1] == n);
    return fits && is_f32(v) && available_at(v, gemm_node);
  }

  Status lower_gemm(int i);
  Status lower_softmax(int i);
  Status lower_elementwise(int i);
  void fold_epilogue(int gemm_node, GemmLaunch& gemm);
  int add_kernel(KernelDef def) {
    prog_.kernels.push_back(std::move(def));
    return static_cast<int>(prog_.kernels.size()) - 1;
  }
  Status emit_elementwise(const EwGroup& group, const std::vector<int>& inputs,
                          const std::vector<int>& outputs, const std::string& nodes);

  ir::Graph& g_;
  std::vector<bool> done_;
  std::vector<std::vector<int>> consumers_;
  std::vector<bool> is_output_;
  LoweredProgram prog_;
};

Status Lowerer::lower_gemm(int i) {
  const ir::Node n = g_.nodes[i];  // copy: new_value may grow g_.nodes' neighbours
  KILN_RETURN_IF_ERROR(require_f32(n));
  const ir::Shape a = shape(n.inputs[0]), b = shape(n.inputs[1]);
  GemmLaunch gemm;
  gemm.a = n.inputs[0];
  gemm.b = n.inputs[1];
  gemm.d = n.outputs[0];
  gemm.nodes = n.name;
  if (a.size() < 2 || b.size() < 2)
    return unimplemented(
        fmt::format("node '{}' ({}): 1-D operands are not supported yet", n.name, n.op));
  if (n.op == "Gemm") {
    gemm.trans_a = n.attr_int("transA", 0) != 0;
    gemm.trans_b = n.attr_int("transB", 0) != 0;
    gemm.alpha = static_cast<float>(n.attr_float("alpha", 1.0));
    gemm.m = gemm.trans_a ? a[1] : a[0];
    gemm.k = gemm.trans_a ? a[0] : a[1];
    gemm.n = gemm.trans_b ? b[0] : b[1];
  } else if (b.size() == 2) {  // [..., M, K] @ [K, N]: fold leading dims into M
    ir::Shape lead(a.begin(), a.end() - 1);
    auto m = ir::shape_numel(lead);
    if (!m)
      return unimplemented(fmt::format("node '{}' (MatMul): M = {} is not linear in the size",
                                       n.name, ir::shape_to_string(lead)));
    gemm.m = *m;
    gemm.k = a.back();
    gemm.n = b[1];
  } else {  // batched: equal batch dims, or A's broadcast over B's
    ir::Shape ab(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
    auto a_batch = ir::shape_numel(ab), b_batch = ir::shape_numel(bb);
    if (!a_batch || !b_batch || (ab != bb && *a_batch != ir::DimExpr::constant(1)))
      return unimplemented(
          fmt::format("node '{}' (MatMul): batch dims {} and {} must be equal (or A's all 1)",
                      n.name, ir::shape_to_string(ab), ir::shape_to_string(bb)));
    gemm.m = a[a.size() - 2];
    gemm.k = a.back();
    gemm.n = b.back();
    gemm.batch = *b_batch;
    auto mk = ir::dim_mul(gemm.m, gemm.k), kn = ir::dim_mul(gemm.k, gemm.n),
         mn = ir::dim_mul(gemm.m, gemm.n);
    if (!mk || !kn || !mn)
      return unimplemented(
          fmt::format("node '{}' (MatMul): strides not linear in the size", n.name));
    gemm.stride_a = ab == bb ? *mk : ir::DimExpr::constant(0);
    gemm.stride_b = *kn;
    gemm.stride_d = *mn;
  }
  if (!gemm.k.is_constant())
    return invalid_argument(fmt::format(
        "node '{}' ({}): the size dimension reaches the reduction axis K = {}; padded requests "
        "would mix padding rows into real results",
        n.name, n.op, gemm.k.to_string()));

  if (n.op == "Gemm" && n.inputs.size() > 2 && n.inputs[2] >= 0) {
    const int c = n.inputs[2];
    const double beta = n.attr_float("beta", 1.0);
    if (beta != 0.0 && bias_like(c, gemm.n, i)) {
      gemm.bias = c;
      if (beta != 1.0 && g_.values[c].constant) {  // scale the constant bias at compile time
        ir::Constant scaled = *g_.values[c].constant;
        for (size_t off = 0; off + 4 <= scaled.bytes.size(); off += 4) {
          float f;
          std::memcpy(&f, &scaled.bytes[off], 4);
          f = static_cast<float>(f * beta);
          std::memcpy(&scaled.bytes[off], &f, 4);
        }
        gemm.bias = new_value(g_.values[c].name + "/beta", shape(c), std::move(scaled));
      } else if (beta != 1.0) {
        gemm.bias = -1;
      }
    }
    if (beta != 0.0 && gemm.bias < 0) {  // general C: D = GEMM, then out = D + beta * C
      gemm.d = new_value(n.name + "/gemm", shape(n.outputs[0]), std::nullopt);
      gemm.epilogue = Epilogue::kNone;
      prog_.steps.push_back(gemm);
      EwGroup group;
      group.inputs = {shape(gemm.d), shape(c)};
      group.out_shape = shape(n.outputs[0]);
      group.ops = {{"mul", {EwOperand::input(1), EwOperand::constant(static_cast<float>(beta))}},
                   {"add", {EwOperand::input(0), EwOperand::temp(0)}}};
      group.outputs = {1};
      return emit_elementwise(group, {gemm.d, c}, {n.outputs[0]}, n.name);
    }
  }
  if (gemm.bias >= 0) gemm.epilogue = Epilogue::kBias;
  fold_epilogue(i, gemm);
  prog_.steps.push_back(gemm);
  return Status();
}

// Folds a following bias Add and/or Relu into the GEMM's epilogue.
void Lowerer::fold_epilogue(int gemm_node, GemmLaunch& gemm) {
  if (gemm.batch != ir::DimExpr::constant(1)) return;
  int next = sole_consumer(gemm.d);
  if (gemm.bias < 0 && next >= 0 && g_.nodes[next].op == "Add") {
    const ir::Node& add = g_.nodes[next];
    int other = add.inputs[0] == gemm.d ? add.inputs[1] : add.inputs[0];
    if (add.inputs[0] != add.inputs[1] && shape(add.outputs[0]) == shape(gemm.d) &&
        bias_like(other, gemm.n, gemm_node)) {
      gemm.bias = other;
      gemm.d = add.outputs[0];
      gemm.nodes += "+" + add.name;
      gemm.epilogue = Epilogue::kBias;
      done_[next] = true;
      next = sole_consumer(gemm.d);
    }
  }
  if (next >= 0 && g_.nodes[next].op == "Relu") {
    gemm.d = g_.nodes[next].outputs[0];
    gemm.nodes += "+" + g_.nodes[next].name;
    gemm.epilogue = gemm.bias >= 0 ? Epilogue::kBiasRelu : Epilogue::kRelu;
    done_[next] = true;
  }
}

Status Lowerer::lower_softmax(int i) {
  const ir::Node& n = g_.nodes[i];
  KILN_RETURN_IF_ERROR(require_f32(n));
  const ir::Shape& s = shape(n.inputs[0]);
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  if (rank == 0 || axis != rank - 1)
    return unimplemented(
        fmt::format("node '{}' (Softmax): only the last axis is supported, got "
                    "axis {} of {}",
                    n.name, axis, ir::shape_to_string(s)));
  if (!s.back().is_constant())
    return invalid_argument(fmt::format(
        "node '{}' (Softmax): the size dimension is the softmax axis ({}); padded requests "
        "would mix padding into real results",
        n.name, ir::shape_to_string(s)));
  auto rows = ir::shape_numel(ir::Shape(s.begin(), s.end() - 1));
  if (!rows)
    return unimplemented(fmt::format("node '{}' (Softmax): rows not linear in the size", n.name));
  const std::string symbol = fmt::format("kiln_softmax_{}", prog_.kernels.size());
  KernelLaunch launch;
  launch.kernel = add_kernel(codegen_softmax(symbol, *rows, s.back().offset));
  launch.args = {{KernelArgRef::Kind::kValue, n.inputs[0]},
                 {KernelArgRef::Kind::kValue, n.outputs[0]},
                 {KernelArgRef::Kind::kSize, -1}};
  launch.work = *rows;
  launch.work_per_block = kSoftmaxRowsPerBlock;
  launch.block = 32 * kSoftmaxRowsPerBlock;
  launch.nodes = n.name;
  prog_.steps.push_back(launch);
  return Status();
}

Status Lowerer::lower_elementwise(int i) {
  EwGroup group;
  std::vector<int> inputs;  // external values, in kernel-parameter order
  std::string nodes;
  group.out_shape = shape(g_.nodes[i].outputs[0]);
  std::vector<int> temp_of(g_.values.size(), -1);
  int node = i;
  while (true) {
    const ir::Node& n = g_.nodes[node];
    KILN_RETURN_IF_ERROR(require_f32(n));
    EwOp op{std::string(ew_function_for_op(n.op)), {}};
    if (static_cast<int>(n.inputs.size()) != ew_function_arity(op.fn))
      return invalid_argument(fmt::format("node '{}' ({}): expected {} inputs, got {}", n.name,
                                          n.op, ew_function_arity(op.fn), n.inputs.size()));
    for (int v : n.inputs) {
      if (temp_of[v] >= 0) {
        op.args.push_back(EwOperand::temp(temp_of[v]));
        continue;
      }
      auto it = std::find(inputs.begin(), inputs.end(), v);
      if (it == inputs.end()) {
        inputs.push_back(v);
        group.inputs.push_back(shape(v));
        it = inputs.end() - 1;
      }
      op.args.push_back(EwOperand::input(static_cast<int>(it - inputs.begin())));
    }
    group.ops.push_back(std::move(op));
    temp_of[n.outputs[0]] = static_cast<int>(group.ops.size()) - 1;
    nodes += (nodes.empty() ? "" : "+") + n.name;
    done_[node] = true;

    // Absorb the next node of a chain: same output shape, its other inputs ready now.
    int next = sole_consumer(n.outputs[0]);
    if (next < 0 || ew_function_for_op(g_.nodes[next].op).empty() ||
        shape(g_.nodes[next].outputs[0]) != group.out_shape)
      break;
    bool ready = true;
    for (int v : g_.nodes[next].inputs) ready &= temp_of[v] >= 0 || available_at(v, i);
    if (!ready) break;
    node = next;
  }
  const int last = g_.nodes[node].outputs[0];
  group.outputs = {temp_of[last]};
  return emit_elementwise(group, inputs, {last}, nodes);
}

Status Lowerer::emit_elementwise(const EwGroup& group, const std::vector<int>& inputs,
                                 const std::vector<int>& outputs, const std::string& nodes) {
  auto work = ir::shape_numel(group.out_shape);
  if (!work)
    return unimplemented(fmt::format("node(s) '{}': output shape {} is not linear in the size",
                                     nodes, ir::shape_to_string(group.out_shape)));
  const std::string symbol = fmt::format("kiln_ew_{}", prog_.kernels.size());
  KernelLaunch launch;
  launch.kernel = add_kernel(codegen_elementwise(symbol, group));
  for (int v : inputs) launch.args.push_back({KernelArgRef::Kind::kValue, v});
  for (int v : outputs) launch.args.push_back({KernelArgRef::Kind::kValue, v});
  launch.args.push_back({KernelArgRef::Kind::kSize, -1});
  launch.work = *work;
  launch.work_per_block = 256;
  launch.block = 256;
  launch.nodes = nodes;
  prog_.steps.push_back(launch);
  return Status();
}

}  // namespace

std::vector<int> step_values(const LaunchStep& step) {
  std::vector<int> out;
  if (const auto* k = std::get_if<KernelLaunch>(&step)) {
    for (const auto& a : k->args)
      if (a.kind == KernelArgRef::Kind::kValue) out.push_back(a.value);
  } else {
    const auto& gm = std::get<GemmLaunch>(step);
    out = {gm.a, gm.b};
    if (gm.bias >= 0) out.push_back(gm.bias);
    out.push_back(gm.d);
  }
  return out;
}

Result<LoweredProgram> lower_graph(ir::Graph& g) { return Lowerer(g).run(); }

}  // namespace kiln::compiler
