#include "compiler/passes/kv_paged.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "compiler/ops/op_util.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {
namespace {

constexpr char kInputIds[] = "input_ids";
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
    return unimplemented(
        fmt::format("generation needs an input '{}' [batch, sequence]; the model has none", name));
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
    return unimplemented(
        fmt::format("{} masks padding keys with '{}', which is not derived from "
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

// --- Positions ----------------------------------------------------------------------------------
//
// A generation step's tokens belong to several sequences, each token at its own position in its
// sequence; the runtime writes that position into `position_ids` [1, T] (and, when the program
// still reads `attention_mask`, ones for every token: runtime/generator_step.cc). The imported
// graph is the prefill of one sequence from position 0, so wherever it computed positions itself
// (an export without position_ids: transformers' cache_position, arange(past_len, past_len +
// seq), is Range(0, S, 1) once the past is empty) it computed the token's index within the step,
// which is a position only for that one prefill. Such Ranges read position_ids instead; whatever
// else the graph computes from the step alone must be the same for every token, or it is refused.

std::optional<ir::DimExpr> known_scalar(const ir::Graph& g, int v) {
  if (v < 0) return std::nullopt;
  std::optional<std::vector<ir::DimExpr>> ints = reference_known_ints(g.values[v]);
  if (!ints || ints->size() != 1) return std::nullopt;
  return ints->front();
}

// Range(0, S, 1) of an integer type: element j is j, the index of token j within the step.
bool is_step_index(const ir::Graph& g, const ir::Node& n) {
  if (!n.domain.empty() || n.op != "Range" || n.inputs.size() != 3 || n.outputs.size() != 1 ||
      !dtype_is_integer(g.values[n.outputs[0]].dtype))
    return false;
  const auto start = known_scalar(g, n.inputs[0]), limit = known_scalar(g, n.inputs[1]),
             delta = known_scalar(g, n.inputs[2]);
  return start == ir::DimExpr::constant(0) && limit == ir::DimExpr::size() &&
         delta == ir::DimExpr::constant(1);
}

// The input `position_ids` int64 [1, S] for a model without one. An internal value of that name
// (an exporter's name for the positions it computed) is renamed first.
int add_position_input(ir::Graph& g, int ids) {
  if (const int old = g.find_value(kPositionIds); old >= 0) {
    std::string name = std::string(kPositionIds) + "_computed";
    for (int k = 1; g.find_value(name) >= 0; ++k)
      name = fmt::format("{}_computed_{}", kPositionIds, k);
    g.values[static_cast<size_t>(old)].name = name;
  }
  const int pos = graph_new_value(g, kPositionIds, DType::kI64,
                                  {ir::DimExpr::constant(1), ir::DimExpr::size()});
  const auto at = std::find(g.inputs.begin(), g.inputs.end(), ids);
  g.inputs.insert(at == g.inputs.end() ? at : at + 1, pos);
  return pos;
}

// Every Range(0, S, 1) reads position_ids instead.
Status positions_from_input(ir::Graph& g, int pos) {
  std::vector<int> ranges;  // their outputs
  for (const ir::Node& n : g.nodes)
    if (is_step_index(g, n)) ranges.push_back(n.outputs[0]);
  std::map<DType, int> made;
  for (int r : ranges) {
    const ir::Value& v = g.values[static_cast<size_t>(r)];
    if (v.dtype != DType::kI64 && v.dtype != DType::kI32)
      return unimplemented(fmt::format(
          "'{}' numbers the step's tokens in {}; kiln feeds positions as int64 or int32", v.name,
          dtype_name(v.dtype)));
    graph_replace_uses(g, r, flat_positions(g, pos, v.dtype, made));
  }
  if (!ranges.empty()) graph_remove_dead(g);
  return Status::ok_status();
}

// Whether `t` has one value along every axis whose length depends on S (`shape`), i.e. the same
// for every token; `first` gets the slice at index 0 of those axes.
bool same_for_every_token(const RefTensor& t, const ir::Shape& shape, std::vector<double>& first) {
  const size_t rank = t.dims.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t i = rank; i-- > 1;) stride[i - 1] = stride[i] * t.dims[i];
  first.clear();
  for (size_t k = 0; k < t.data.size(); ++k) {
    size_t base = k;  // k with every S axis' index set to 0
    bool at_zero = true;
    for (size_t a = 0; a < rank; ++a) {
      if (shape[a].is_constant()) continue;
      const int64_t idx = (static_cast<int64_t>(k) / stride[a]) % t.dims[a];
      base -= static_cast<size_t>(idx * stride[a]);
      at_zero = at_zero && idx == 0;
    }
    if (at_zero) first.push_back(t.data[k]);
    if (t.data[k] != t.data[base] && !(std::isnan(t.data[k]) && std::isnan(t.data[base])))
      return false;
  }
  return true;
}

// The values computed from the step alone — from no input but attention_mask (ones) and the
// step's size S — must be the same for every token and at every S: the index of a token within
// the step, the number of tokens in the step, a cumulative sum of the mask are no property of
// any sequence. Checked by evaluating them (at two sizes, the mask all ones) in graph order; the
// first that fails is named.
Status check_step_values(const ir::Graph& g, int mask) {
  std::vector<char> from_step(g.values.size(), 0);
  if (mask >= 0) from_step[static_cast<size_t>(mask)] = 1;
  std::vector<int> wanted;
  for (const ir::Node& n : g.nodes) {
    bool step = true;
    for (int in : n.inputs)
      if (in >= 0) {
        const ir::Value& v = g.values[static_cast<size_t>(in)];
        step = step && (from_step[static_cast<size_t>(in)] || v.constant || v.ints);
      }
    if (!step) continue;
    for (int o : n.outputs)
      if (o >= 0 && !g.values[static_cast<size_t>(o)].constant) {
        from_step[static_cast<size_t>(o)] = 1;
        if (!g.values[static_cast<size_t>(o)].ints) wanted.push_back(o);
      }
  }
  if (wanted.empty()) return Status::ok_status();
  constexpr int64_t kSizes[] = {2, 5};
  std::map<int, std::vector<double>> seen;  // per value: the slice of the first size
  for (const int64_t s : kSizes) {
    std::map<std::string, RefTensor> in;
    if (mask >= 0) {
      const ir::Value& m = g.values[static_cast<size_t>(mask)];
      std::vector<int64_t> dims;
      for (const ir::DimExpr& d : m.shape) dims.push_back(d.eval(s));
      RefTensor ones = ref_make(m.dtype, dims);
      std::fill(ones.data.begin(), ones.data.end(), 1.0);
      in[m.name] = std::move(ones);
    }
    Result<std::map<int, RefTensor>> r = reference_run_values(g, s, in, wanted);
    if (!r.ok())
      return unimplemented(fmt::format(
          "the graph computes values from the step's size{} alone, and kiln could not evaluate "
          "them to check that they are the same for every token: {}",
          mask >= 0 ? " and attention_mask" : "", r.status().message()));
    for (int v : wanted) {  // graph order: the first that fails is the cause
      const ir::Value& val = g.values[static_cast<size_t>(v)];
      std::vector<double> first;
      const bool uniform = same_for_every_token(r->at(v), val.shape, first);
      const auto [it, fresh] = seen.emplace(v, first);
      if (uniform && (fresh || it->second == first)) continue;
      const ir::Node& n = g.nodes[static_cast<size_t>(val.producer)];
      return unimplemented(fmt::format(
          "node '{}' ({}) computes '{}' from {} alone, and it {}: a generation step holds the "
          "tokens of several sequences, each at its own position, and kiln feeds each token's "
          "position through position_ids{}. Positions computed this way (from a cumulative sum "
          "of the mask, say) cannot be fed: export the decoder with a position_ids input, or "
          "without one as transformers computes positions (cache_position: Range(past_len, "
          "past_len + seq))",
          n.name, n.op, val.name,
          mask >= 0 ? "attention_mask and the step's size" : "the step's size",
          uniform ? "changes with the number of tokens in the step" : "differs from token to token",
          mask >= 0 ? " and writes attention_mask as ones for every token" : ""));
    }
  }
  return Status::ok_status();
}

}  // namespace

int flat_positions(ir::Graph& g, int pos, DType dt, std::map<DType, int>& made) {
  if (auto it = made.find(dt); it != made.end()) return it->second;
  const ir::Shape s{ir::DimExpr::size()};
  const DType pt = g.values[static_cast<size_t>(pos)].dtype;
  if (!made.count(pt)) {
    const int shape = graph_new_constant(g, "position_ids_shape", DType::kI64, {1}, {-1});
    const int out = graph_new_value(g, "position_ids_flat", pt, s);
    graph_insert_node(g, 0,
                      {.name = graph_unique_node_name(g, "kv_paged_positions"),
                       .op = "Reshape",
                       .domain = "",
                       .inputs = {pos, shape},
                       .outputs = {out},
                       .attrs = {}});
    made[pt] = out;
  }
  if (dt == pt) return made[pt];
  const int from = made[pt];
  const int out = graph_new_value(g, fmt::format("position_ids_{}", dtype_name(dt)), dt, s);
  graph_insert_node(g, static_cast<size_t>(g.values[static_cast<size_t>(from)].producer) + 1,
                    {.name = graph_unique_node_name(g, "kv_paged_positions_cast"),
                     .op = "Cast",
                     .domain = "",
                     .inputs = {from},
                     .outputs = {out},
                     .attrs = {{"to", int64_t{dt == DType::kI64 ? 7 : 6}}}});
  return made[dt] = out;
}

Status kv_paged_rewrite(ir::Graph& g) {
  if (g.kv_presents.empty())
    return invalid_argument(
        "the config has `kv_cache:`, but the model has no KV cache: no past_key_values input is "
        "concatenated into a present output or appended to one by a GroupQueryAttention "
        "(export the decoder with use_cache=True, or drop `kv_cache:`)");
  const int ids = find_input(g, kInputIds);
  int pos = find_input(g, kPositionIds);
  KILN_RETURN_IF_ERROR(check_token_input(g, ids, kInputIds));
  if (pos >= 0) KILN_RETURN_IF_ERROR(check_token_input(g, pos, kPositionIds));
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
  // The prefill rewrite left each present as a one-input Concat of the new keys or values (a
  // copy); with the presents gone, attention reads the new rows directly.
  for (ir::Node& n : g.nodes)
    if (n.op == "Concat" && n.domain.empty() && n.inputs.size() == 1 && n.outputs.size() == 1 &&
        g.values[n.inputs[0]].shape == g.values[n.outputs[0]].shape)
      graph_replace_uses(g, n.outputs[0], n.inputs[0]);
  // Dead now: the causal and padding masks (and the Ranges they compared), those copies.
  graph_remove_dead(g);
  // Positions the graph computed from the step read position_ids (a model without that input
  // gets it: the runtime writes it every step).
  if (pos < 0) pos = add_position_input(g, ids);
  KILN_RETURN_IF_ERROR(positions_from_input(g, pos));
  // Inputs nothing reads any more (the attention mask, usually) go; input_ids and position_ids
  // stay (the runtime writes them every step).
  const auto users = graph_users(g);
  std::erase_if(g.inputs, [&](int v) {
    return v != ids && v != pos && users[static_cast<size_t>(v)].empty();
  });
  int mask = -1;
  for (int v : g.inputs) {
    if (v == ids || v == pos) continue;
    if (g.values[v].name != kAttentionMask)
      return unimplemented(fmt::format(
          "input '{}': a generation program is fed input_ids, position_ids and attention_mask "
          "only",
          g.values[v].name));
    mask = v;
  }
  // A mask still read is fed as ones (every token real); what the graph computes from it and
  // from the step's size alone must then not depend on the step's tokens.
  if (mask >= 0 && !is_tokens_shape(g.values[mask].shape))
    return unimplemented(
        fmt::format("input 'attention_mask' is {} and still read after the attention became paged "
                    "attention; a generation program feeds it as [1, tokens] of ones",
                    ir::shape_to_string(g.values[mask].shape)));
  KILN_RETURN_IF_ERROR(check_step_values(g, mask));
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
