#include "compiler/passes/precision.h"

#include <fmt/format.h>

#include <algorithm>

#include "compiler/passes/graph_edit.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

// ONNX TensorProto element types of the float dtypes.
constexpr int64_t kOnnxFloat = 1, kOnnxFloat16 = 10, kOnnxBFloat16 = 16;

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

ir::Node cast_node(ir::Graph& g, const std::string& hint, int in, int out, int64_t to) {
  ir::Node n;
  n.name = graph_unique_node_name(g, hint);
  n.op = "Cast";
  n.inputs = {in};
  n.outputs = {out};
  n.attrs["to"] = to;
  return n;
}

// Float values computed only from integers and small constants (positions → rotary angles,
// say) stay f32: they carry no activation data, and bf16 cannot even hold positions above 256
// exactly. A lookup in a float table (an embedding: Gather from a constant) or any use of a large
// float constant is model data, not position arithmetic. Returns, per value, whether it is such
// an "index-derived" float.
constexpr int64_t kMaxDerivedConstant = 4096;  // elements; inverse frequencies are far smaller

bool large_float_constant(const ir::Value& v) {
  if (!v.constant || !is_float(v.dtype)) return false;
  int64_t n = 1;
  for (int64_t d : v.constant->dims) n *= d;
  return n > kMaxDerivedConstant;
}

std::vector<bool> index_derived_floats(const ir::Graph& g) {
  std::vector<bool> derived(g.values.size(), false);
  for (const ir::Node& n : g.nodes) {
    const bool lookup = (n.op == "Gather" || n.op == "GatherElements" || n.op == "GatherND") &&
                        !n.inputs.empty() && g.values[n.inputs[0]].constant &&
                        is_float(g.values[n.inputs[0]].dtype);
    if (lookup) continue;
    bool any_dynamic = false, all_ok = true;
    for (int v : n.inputs) {
      if (v < 0) continue;
      const ir::Value& val = g.values[v];
      if (large_float_constant(val)) all_ok = false;
      if (val.constant || (val.producer < 0 && val.ints)) continue;
      any_dynamic = true;
      if (is_float(val.dtype)) {
        all_ok &= derived[v];
      } else if (val.producer >= 0) {
        // An integer computed from float activations (an argmax, say) is not a position.
        for (int w : g.nodes[val.producer].inputs)
          if (w >= 0 && is_float(g.values[w].dtype) && !g.values[w].constant && !derived[w])
            all_ok = false;
      }
    }
    if (!any_dynamic || !all_ok) continue;
    for (int o : n.outputs)
      if (o >= 0 && g.values[o].dtype == DType::kF32) derived[o] = true;
  }
  return derived;
}

}  // namespace

Status precision_lower(ir::Graph& g, Precision precision) {
  if (precision != Precision::kF16 && precision != Precision::kBF16) return Status::ok_status();
  const DType cd = precision == Precision::kF16 ? DType::kF16 : DType::kBF16;
  const int64_t cd_onnx = precision == Precision::kF16 ? kOnnxFloat16 : kOnnxBFloat16;

  const std::vector<bool> derived = index_derived_floats(g);
  const auto users = graph_users(g);
  const size_t original_values = g.values.size();
  std::vector<bool> is_input(original_values, false), is_output(original_values, false);
  std::vector<bool> was_f32(original_values, false);
  for (size_t v = 0; v < original_values; ++v) was_f32[v] = g.values[v].dtype == DType::kF32;
  for (int v : g.inputs) is_input[v] = true;
  for (int v : g.outputs) is_output[v] = true;

  // A node's float outputs take the compute dtype unless they are index-derived; so does a Cast
  // to f32 that produces activation data.
  for (ir::Node& n : g.nodes) {
    if (n.op == "Cast" && n.domain.empty() && n.attr_int("to", 0) == kOnnxFloat &&
        !derived[n.outputs[0]])
      n.attrs["to"] = cd_onnx;
  }
  // Constants: the compute dtype unless only index-derived nodes read them.
  for (size_t v = 0; v < original_values; ++v) {
    ir::Value& val = g.values[v];
    if (val.dtype != DType::kF32) continue;
    if (val.constant) {
      bool only_derived = !users[v].empty();
      for (int u : users[v])
        for (int o : g.nodes[u].outputs) only_derived &= o >= 0 && derived[o];
      if (only_derived) continue;
      KILN_ASSIGN_OR_RETURN(val.constant->bytes, reference_encode_f32_constant(val, cd));
      val.dtype = cd;
    } else if (!is_input[v] && !derived[v]) {
      val.dtype = cd;
    }
  }
  // Index-derived f32 values read by compute-dtype nodes: cast once, right after the producer.
  // Readers are rewired first (node indexes still those of `users`), casts inserted after.
  std::vector<std::pair<int, int>> casts;  // (f32 value, its compute-dtype copy)
  for (size_t v = 0; v < original_values; ++v) {
    if (!derived[v]) continue;
    int cast = -1;
    for (int u : users[v]) {
      bool compute = false;
      for (int o : g.nodes[u].outputs) compute |= o >= 0 && g.values[o].dtype == cd;
      if (!compute) continue;
      if (cast < 0) {
        cast = graph_new_value(g, g.values[v].name + "/" + std::string(dtype_name(cd)), cd,
                               g.values[v].shape);
        casts.emplace_back(static_cast<int>(v), cast);
      }
      for (int& in : g.nodes[u].inputs)
        if (in == static_cast<int>(v)) in = cast;
    }
  }
  for (const auto& [v, cast] : casts) {
    const size_t pos = static_cast<size_t>(g.values[v].producer + 1);
    graph_insert_node(g, pos, cast_node(g, g.values[v].name + "/cast", v, cast, cd_onnx));
  }
  // f32 graph inputs: cast in at the front.
  for (int v : std::vector<int>(g.inputs)) {
    if (g.values[v].dtype != DType::kF32 || derived[v]) continue;
    const int cast = graph_new_value(g, g.values[v].name + "/" + std::string(dtype_name(cd)), cd,
                                     g.values[v].shape);
    for (ir::Node& n : g.nodes)
      for (int& in : n.inputs)
        if (in == v) in = cast;
    graph_insert_node(g, 0, cast_node(g, g.values[v].name + "/cast", v, cast, cd_onnx));
  }
  // f32 graph outputs (now compute dtype inside): the producer writes a compute-dtype value,
  // a final Cast writes the f32 output.
  for (int& out : g.outputs) {
    ir::Value& val = g.values[out];
    // Only outputs that were f32 get a Cast back (a model's own f16 output stays f16).
    if (val.dtype != cd || is_input[out] || !was_f32[out]) continue;
    const int inner = graph_new_value(g, val.name + "/" + std::string(dtype_name(cd)), cd,
                                      g.values[out].shape);
    const int producer = g.values[out].producer;
    if (producer < 0) continue;
    for (int& o : g.nodes[producer].outputs)
      if (o == out) o = inner;
    g.values[inner].producer = producer;
    for (ir::Node& n : g.nodes)
      for (int& in : n.inputs)
        if (in == out) in = inner;
    g.values[out].dtype = DType::kF32;
    g.values[out].producer = -1;
    graph_insert_node(g, g.nodes.size(),
                      cast_node(g, g.values[out].name + "/cast", inner, out, kOnnxFloat));
  }
  // Casts now to their input's own dtype (an f32 export's casts around its norms) move nothing:
  // their readers read the input. Where no neighbour absorbed one it ran as its own launch (the
  // Llama's first norm, whose input the residual reads too).
  bool removed = false;
  for (const ir::Node& n : g.nodes) {
    if (!graph_is_same_dtype_cast(g, n)) continue;
    const int in = n.inputs[0], out = n.outputs[0];
    if (std::find(g.outputs.begin(), g.outputs.end(), out) != g.outputs.end()) continue;
    graph_replace_uses(g, out, in);
    removed = true;
  }
  if (removed) graph_remove_dead(g);
  return ir::graph_verify(g);
}

}  // namespace kiln::compiler
