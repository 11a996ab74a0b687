#include "compiler/passes/kv_paged.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "compiler/ops/op_util.h"
#include "compiler/passes/graph_edit.h"

namespace kiln::compiler {
namespace {

constexpr char kInputIds[] = "input_ids";
constexpr char kPositionIds[] = "position_ids";
constexpr char kAttentionMask[] = "attention_mask";

int find_input(const ir::Graph& g, const std::string& name) {
  for (int v : g.inputs)
    if (g.values[v].name == name) return v;
  return -1;
}

bool is_tokens_shape(const ir::Shape& s) {
  return s.size() == 2 && s[0] == ir::DimExpr::constant(1) && s[1] == ir::DimExpr::size();
}

// input_ids / position_ids: integer [1, T].
Status check_token_input(const ir::Graph& g, int v, const char* name) {
  if (v < 0)
    return unimplemented(fmt::format(
        "generation needs an input '{}' [batch, sequence]; the model has none{}", name,
        std::string(name) == kPositionIds
            ? " (kiln feeds each token's position through it: export the decoder with "
              "position_ids, as Optimum and transformers' generation exports do)"
            : ""));
  const ir::Value& x = g.values[v];
  if (!is_tokens_shape(x.shape))
    return invalid_argument(fmt::format(
        "input '{}' is {}; a generation program runs batch 1 with the step's tokens on the size "
        "axis: bind the batch dim to 1 (`dims: {{batch: 1}}`) and make the sequence dim the "
        "size (`size_dim`)",
        name, ir::shape_to_string(x.shape)));
  if (x.dtype != DType::kI64 && x.dtype != DType::kI32)
    return invalid_argument(
        fmt::format("input '{}' is {}, expected int64 or int32", name, dtype_name(x.dtype)));
  return Status::ok_status();
}

// One kiln.Attention of the prefill step → kiln.PagedAttention of layer `layer`.
Status to_paged(ir::Graph& g, size_t i, int64_t layer, bool has_mask_input) {
  const ir::Node& n = g.nodes[i];
  const std::string where = fmt::format("attention '{}'", n.name);
  if (n.attr_int("causal", 0) != 1)
    return unimplemented(where + " is not causal; generation needs a causal decoder");
  if (n.inputs.size() > 3 && n.inputs[3] >= 0)
    return unimplemented(fmt::format(
        "{} has a mask '{}' that is neither causal nor key padding (see `kiln inspect` for why); "
        "a generation program masks by sequence and position only",
        where, g.values[n.inputs[3]].name));
  if (n.inputs.size() > 4 && n.inputs[4] >= 0 && !has_mask_input)
    return unimplemented(fmt::format("{} masks padding keys with '{}', which is not derived from "
                                     "an attention_mask input",
                                     where, g.values[n.inputs[4]].name));
  const ir::Shape& q = g.values[n.inputs[0]].shape;
  const ir::Shape& k = g.values[n.inputs[1]].shape;
  const ir::Shape& v = g.values[n.inputs[2]].shape;
  if (q.size() != 4 || k.size() != 4 || v.size() != 4 || q[2] != k[2] || k[3] != v[3])
    return unimplemented(fmt::format(
        "{}: Q {}, K {}, V {}; a generation program needs the step's own tokens as keys (the "
        "past comes from the cache) and keys and values of one head size",
        where, ir::shape_to_string(q), ir::shape_to_string(k), ir::shape_to_string(v)));
  ir::Node paged{.name = n.name,
                 .op = "PagedAttention",
                 .domain = "kiln",
                 .inputs = {n.inputs[0], n.inputs[1], n.inputs[2]},
                 .outputs = n.outputs,
                 .attrs = {{"scale", n.attr_float("scale", 1.0)}, {"layer", layer}}};
  graph_replace_node(g, i, std::move(paged));
  return Status::ok_status();
}

}  // namespace

Status kv_paged_rewrite(ir::Graph& g) {
  if (g.kv_presents.empty())
    return invalid_argument(
        "the config has `kv_cache:`, but the model has no KV cache: no past_key_values input is "
        "concatenated into a present output (export the decoder with use_cache=True, or drop "
        "`kv_cache:`)");
  const int ids = find_input(g, kInputIds);
  const int pos = find_input(g, kPositionIds);
  KILN_RETURN_IF_ERROR(check_token_input(g, ids, kInputIds));
  KILN_RETURN_IF_ERROR(check_token_input(g, pos, kPositionIds));
  const bool has_mask = find_input(g, kAttentionMask) >= 0;
  int64_t layers = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].domain == "kiln" && g.nodes[i].op == "Attention")
      KILN_RETURN_IF_ERROR(to_paged(g, i, layers++, has_mask));
  if (layers == 0)
    return unimplemented(
        "the model has a KV cache, but no attention was recognised (`kiln inspect MODEL` says "
        "why each Softmax did not become attention)");
  // The presents go: the runtime's cache holds them.
  const std::set<std::string> presents(g.kv_presents.begin(), g.kv_presents.end());
  std::erase_if(g.outputs, [&](int v) { return presents.count(g.values[v].name) > 0; });
  if (g.outputs.size() != 1) {
    std::string names;
    for (int v : g.outputs) names += (names.empty() ? "'" : ", '") + g.values[v].name + "'";
    return unimplemented(fmt::format(
        "a generation program returns the logits only; besides the presents the model has {} "
        "outputs ({})",
        g.outputs.size(), names));
  }
  graph_remove_dead(g);
  // Inputs nothing reads any more (the attention mask, usually) go; input_ids and position_ids
  // stay (the runtime writes them every step).
  const auto users = graph_users(g);
  std::erase_if(g.inputs, [&](int v) {
    return v != ids && v != pos && users[static_cast<size_t>(v)].empty();
  });
  for (int v : g.inputs)
    if (v != ids && v != pos && g.values[v].name != kAttentionMask)
      return unimplemented(fmt::format(
          "input '{}': a generation program is fed input_ids, position_ids and attention_mask "
          "only",
          g.values[v].name));
  g.kv_presents.clear();
  return ir::graph_verify(g);
}

Result<GenerationShape> generation_shape(const ir::Graph& g) {
  GenerationShape s;
  for (int v : g.inputs) {
    const std::string& name = g.values[v].name;
    if (name == kInputIds) s.input_ids = name;
    if (name == kPositionIds) s.position_ids = name;
    if (name == kAttentionMask) s.attention_mask = name;
  }
  if (s.input_ids.empty() || s.position_ids.empty())
    return internal_error("generation program without input_ids or position_ids");
  if (g.outputs.size() != 1) return internal_error("generation program with several outputs");
  const ir::Value& logits = g.values[g.outputs[0]];
  if (logits.shape.size() != 3 || logits.shape[0] != ir::DimExpr::constant(1) ||
      logits.shape[1] != ir::DimExpr::size() || !logits.shape[2].is_constant() ||
      !dtype_is_float(logits.dtype))
    return unimplemented(fmt::format(
        "output '{}' is {} {}; a generation program's output is the logits [1, tokens, vocab] "
        "of a float type",
        logits.name, dtype_name(logits.dtype), ir::shape_to_string(logits.shape)));
  s.logits = logits.name;
  s.vocab = logits.shape[2].offset;
  s.logits_dtype = logits.dtype;
  std::set<int64_t> seen;
  for (const ir::Node& n : g.nodes) {
    if (n.domain != "kiln" || n.op != "PagedAttention") continue;
    const ir::Shape& k = g.values[n.inputs[1]].shape;
    const int64_t layer = n.attr_int("layer", -1);
    if (!seen.insert(layer).second) return internal_error(fmt::format("layer {} twice", layer));
    if (s.layers == 0) {
      s.kv_heads = k[1].offset;
      s.head_dim = k[3].offset;
      s.kv_dtype = g.values[n.inputs[1]].dtype;
    } else if (k[1].offset != s.kv_heads || k[3].offset != s.head_dim ||
               g.values[n.inputs[1]].dtype != s.kv_dtype) {
      return unimplemented(fmt::format(
          "attention '{}' has keys {} {}, the first layer {} heads of {}: the cache has one "
          "shape for every layer",
          n.name, dtype_name(g.values[n.inputs[1]].dtype), ir::shape_to_string(k), s.kv_heads,
          s.head_dim));
    }
    ++s.layers;
  }
  if (s.layers == 0 || *seen.begin() != 0 || *seen.rbegin() != s.layers - 1)
    return internal_error("generation program: layers are not 0..n-1");
  return s;
}

}  // namespace kiln::compiler
