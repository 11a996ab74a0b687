#include "compiler/frontend/onnx_kv_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace kiln::compiler {

namespace {

int64_t attr_int(const onnx::NodeProto& n, const std::string& name, int64_t fallback) {
  for (const auto& a : n.attribute())
    if (a.name() == name) return a.i();
  return fallback;
}

bool passes_through(const onnx::NodeProto& n) {
  return (n.op_type() == "Identity" || n.op_type() == "Cast" ||
          (n.op_type() == "Concat" && n.input_size() == 1)) &&
         n.input_size() >= 1;
}

int64_t declared_rank(const onnx::ValueInfoProto& v) {
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return -1;
  return v.type().tensor_type().shape().dim_size();
}

// One pair as found in the graph.
struct Found {
  OnnxKvPair pair;
  int concat = -1;                 // node index of the Concat(past, new) along axis 2
  std::string new_rows;            // its second input: this call's keys or values
  std::vector<std::string> chain;  // the past input and the values passed through from it
  int gqa = -1;                    // or: node index of the GroupQueryAttention that appends
  int gqa_past = -1;               // its past_key (3) or past_value (4) input
};

bool is_gqa(const onnx::NodeProto& n) {
  return n.op_type() == "GroupQueryAttention" && n.domain() == "com.microsoft";
}

// The value back through pass-through nodes (at most 8) to a graph input in `inputs`, that
// input last; empty when it reaches none.
std::vector<std::string> chain_to_input(const onnx::GraphProto& g,
                                        const std::map<std::string, int>& producer,
                                        const std::set<std::string>& inputs, std::string v) {
  std::vector<std::string> chain = {std::move(v)};
  while (!inputs.count(chain.back()) && producer.count(chain.back()) && chain.size() < 8) {
    const onnx::NodeProto& n = g.node(producer.at(chain.back()));
    if (!passes_through(n)) break;
    chain.push_back(n.input(0));
  }
  if (!inputs.count(chain.back())) chain.clear();
  return chain;
}

std::vector<Found> find_pairs(const onnx::GraphProto& g) {
  std::map<std::string, int> producer;
  for (int i = 0; i < g.node_size(); ++i)
    for (const auto& o : g.node(i).output()) producer[o] = i;
  // Pasts: rank-4 inputs whose sequence axis (2) is symbolic — a cache grows, so no exporter
  // writes it as a number.
  std::set<std::string> inputs;
  for (const auto& in : g.input())
    if (declared_rank(in) == 4 && in.type().tensor_type().shape().dim(2).has_dim_param())
      inputs.insert(in.name());
  // The Concat's result must also feed the layer (its attention), not only the output.
  std::map<std::string, int> readers;
  for (const auto& n : g.node())
    for (const auto& in : n.input()) ++readers[in];
  std::vector<Found> found;
  for (const auto& out : g.output()) {
    if (declared_rank(out) != 4) continue;
    // The output itself, or behind an Identity/Cast.
    std::string v = out.name();
    int c = -1;
    for (int steps = 0; steps < 4 && producer.count(v); ++steps) {
      const onnx::NodeProto& n = g.node(producer.at(v));
      if (n.op_type() == "Concat" || is_gqa(n)) {
        c = producer.at(v);
        break;
      }
      if (n.op_type() != "Identity" && n.op_type() != "Cast") break;
      v = n.input(0);
    }
    // com.microsoft GroupQueryAttention appends inside: past_key/past_value (inputs 3, 4) →
    // present_key/present_value (outputs 1, 2), the past's axis 2 symbolic here too: the tokens
    // so far, or with past_present_share_buffer the maximum length (present's axis 2 alike).
    if (c >= 0 && is_gqa(g.node(c))) {
      const onnx::NodeProto& n = g.node(c);
      const int slot = n.output_size() > 1 && n.output(1) == v   ? 3
                       : n.output_size() > 2 && n.output(2) == v ? 4
                                                                 : -1;
      if (slot < 0 || n.input_size() <= slot || n.input(slot).empty()) continue;
      std::vector<std::string> chain = chain_to_input(g, producer, inputs, n.input(slot));
      if (chain.empty()) continue;
      found.push_back({.pair = {chain.back(), out.name()},
                       .concat = -1,
                       .new_rows = {},
                       .chain = chain,
                       .gqa = c,
                       .gqa_past = slot});
      continue;
    }
    if (c < 0 || g.node(c).input_size() != 2) continue;
    const int64_t axis = attr_int(g.node(c), "axis", 0);
    if (axis != 2 && axis != -2) continue;
    // The first input, back through pass-through nodes to a graph input.
    std::vector<std::string> chain = chain_to_input(g, producer, inputs, g.node(c).input(0));
    if (chain.empty() || readers[g.node(c).output(0)] == 0) continue;
    found.push_back({{chain.back(), out.name()}, c, g.node(c).input(1), chain});
  }
  return found;
}

void set_dim(onnx::ValueInfoProto& v, int axis, const onnx::TensorShapeProto_Dimension& d) {
  auto* shape = v.mutable_type()->mutable_tensor_type()->mutable_shape();
  if (axis < shape->dim_size()) *shape->mutable_dim(axis) = d;
}

onnx::NodeProto make_node(const std::string& op, const std::string& name,
                          std::vector<std::string> inputs, const std::string& output) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (const std::string& in : inputs) n.add_input(in);
  n.add_output(output);
  return n;
}

onnx::NodeProto make_int64s(const std::string& name, const std::vector<int64_t>& values) {
  onnx::NodeProto n = make_node("Constant", name, {}, name);
  auto* attr = n.add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  auto* t = attr->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return n;
}

// The nodes that replace Shape(past[, start, end]): the past's shape with an empty sequence axis,
// [batch, heads, 0, head_dim][start:end], the batch read from input_ids (so nothing depends on a
// layer's keys, which may themselves depend on the past's length through the positions).
Result<std::vector<onnx::NodeProto>> empty_past_shape(const onnx::NodeProto& shape,
                                                      const onnx::ValueInfoProto& past, int index) {
  const auto& dims = past.type().tensor_type().shape();
  const int64_t rank = 4;
  int64_t start = attr_int(shape, "start", 0), end = attr_int(shape, "end", rank);
  start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
  end = std::clamp<int64_t>(end < 0 ? end + rank : end, 0, rank);
  const std::string base = fmt::format("{}/kiln_empty_past_{}", shape.output(0), index);
  std::vector<onnx::NodeProto> nodes;
  std::vector<std::string> parts;
  for (int64_t a = start; a < end; ++a) {
    const std::string part = fmt::format("{}/dim{}", base, a);
    if (a == 0) {
      nodes.push_back(make_node("Shape", part + "/ids", {"input_ids"}, part + "/ids"));
      nodes.push_back(make_int64s(part + "/at", {0}));
      nodes.push_back(make_node("Gather", part, {part + "/ids", part + "/at"}, part));
    } else if (a == 2) {
      nodes.push_back(make_int64s(part, {0}));
    } else {
      if (!dims.dim(static_cast<int>(a)).has_dim_value())
        return unimplemented(
            fmt::format("KV cache: past '{}' has a symbolic dim {} ('{}'); "
                        "kiln needs its heads and head size as numbers",
                        past.name(), a, dims.dim(static_cast<int>(a)).dim_param()));
      nodes.push_back(make_int64s(part, {dims.dim(static_cast<int>(a)).dim_value()}));
    }
    parts.push_back(part);
  }
  onnx::NodeProto concat = make_node("Concat", base, parts, shape.output(0));
  auto* axis = concat.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(0);
  nodes.push_back(std::move(concat));
  return nodes;
}

constexpr char kGqaSeqlens[] = "kiln_gqa_prefill/seqlens_k";
constexpr char kGqaTotal[] = "kiln_gqa_prefill/total_sequence_length";

onnx::NodeProto make_cast(const std::string& name, const std::string& in, int64_t to) {
  onnx::NodeProto n = make_node("Cast", name, {in}, name);
  auto* attr = n.add_attribute();
  attr->set_name("to");
  attr->set_type(onnx::AttributeProto::INT);
  attr->set_i(to);
  return n;
}

// seqlens_k = S - 1 for every batch (int32 [batch]) and total_sequence_length = S (an int32
// scalar), S = input_ids' sequence length: a GroupQueryAttention's lengths for a prefill from an
// empty past. (kiln's legalization reads neither — causality decides which keys a query sees —
// but the rewritten model stays one onnxruntime would run.)
std::vector<onnx::NodeProto> gqa_prefill_lengths() {
  const std::string base = "kiln_gqa_prefill";
  std::vector<onnx::NodeProto> nodes;
  onnx::NodeProto zero = make_int64s(base + "/zero", {0}), one = make_int64s(base + "/one", {1});
  for (onnx::NodeProto* c : {&zero, &one}) {  // scalars
    c->mutable_attribute(0)->mutable_t()->clear_dims();
    nodes.push_back(*c);
  }
  nodes.push_back(make_node("Shape", base + "/shape", {"input_ids"}, base + "/shape"));
  nodes.push_back(make_node("Gather", base + "/S", {base + "/shape", one.output(0)}, base + "/S"));
  nodes.push_back(make_cast(kGqaTotal, base + "/S", onnx::TensorProto::INT32));
  // [batch]: input_ids' first column times zero, plus S - 1.
  onnx::NodeProto col =
      make_node("Gather", base + "/col", {"input_ids", zero.output(0)}, base + "/col");
  auto* axis = col.add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  nodes.push_back(std::move(col));
  nodes.push_back(make_cast(base + "/col64", base + "/col", onnx::TensorProto::INT64));
  nodes.push_back(
      make_node("Mul", base + "/zeros", {base + "/col64", zero.output(0)}, base + "/zeros"));
  nodes.push_back(make_node("Sub", base + "/S-1", {base + "/S", one.output(0)}, base + "/S-1"));
  nodes.push_back(
      make_node("Add", base + "/seqlens", {base + "/zeros", base + "/S-1"}, base + "/seqlens"));
  nodes.push_back(make_cast(kGqaSeqlens, base + "/seqlens", onnx::TensorProto::INT32));
  return nodes;
}

}  // namespace

std::vector<OnnxKvPair> onnx_kv_pairs(const onnx::GraphProto& g) {
  std::vector<OnnxKvPair> pairs;
  for (const Found& f : find_pairs(g)) pairs.push_back(f.pair);
  return pairs;
}

Result<std::vector<OnnxKvPair>> onnx_kv_to_prefill(onnx::GraphProto& g) {
  const std::vector<Found> found = find_pairs(g);
  std::vector<OnnxKvPair> pairs;
  if (found.empty()) return pairs;
  const onnx::ValueInfoProto* ids = nullptr;
  for (const auto& in : g.input())
    if (in.name() == "input_ids" && declared_rank(in) == 2) ids = &in;
  if (ids == nullptr)
    return unimplemented(fmt::format(
        "the model has a KV cache ('{}' → '{}', ...) but no input_ids [batch, sequence] input "
        "to take the batch and sequence dims from",
        found[0].pair.past, found[0].pair.present));
  const auto batch = ids->type().tensor_type().shape().dim(0);
  const auto seq = ids->type().tensor_type().shape().dim(1);

  std::set<std::string> dropped_values, dropped_inputs;
  std::set<int> gqas;
  for (const Found& f : found) {
    pairs.push_back(f.pair);
    if (f.gqa >= 0) {
      // No past: present = this call's keys or values, attention causal over them.
      g.mutable_node(f.gqa)->set_input(f.gqa_past, "");
      gqas.insert(f.gqa);
    } else {
      // present = the new rows (a one-input Concat copies them).
      onnx::NodeProto& c = *g.mutable_node(f.concat);
      c.clear_input();
      c.add_input(f.new_rows);
    }
    dropped_values.insert(f.chain.begin(), f.chain.end());
    dropped_inputs.insert(f.pair.past);
  }
  // A GroupQueryAttention without its past: seqlens_k and total_sequence_length describe the new
  // tokens only (S - 1 for every batch, and S), whatever the graph computed them from (the
  // attention mask over past and new tokens, usually; with a shared buffer, the valid rows).
  if (!gqas.empty()) {
    std::vector<onnx::NodeProto> made = gqa_prefill_lengths();
    for (int i : gqas) {
      onnx::NodeProto& n = *g.mutable_node(i);
      while (n.input_size() < 7) n.add_input("");
      n.set_input(5, kGqaSeqlens);
      n.set_input(6, kGqaTotal);
    }
    google::protobuf::RepeatedPtrField<onnx::NodeProto> front;
    for (onnx::NodeProto& m : made) *front.Add() = std::move(m);
    for (const auto& n : g.node()) *front.Add() = n;
    g.mutable_node()->Swap(&front);
  }
  // What else reads the pasts: the pass-through nodes of the chains (dropped), Shapes (replaced
  // in place by the empty past's shape), nothing else.
  std::map<std::string, const onnx::ValueInfoProto*> past_info;
  for (const auto& in : g.input()) past_info[in.name()] = &in;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  int shapes = 0;
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    std::string read;
    for (const auto& in : n.input())
      if (dropped_values.count(in)) read = in;
    if (read.empty()) {
      *nodes.Add() = n;
      continue;
    }
    if (passes_through(n) && n.output_size() == 1 && dropped_values.count(n.output(0))) continue;
    if (n.op_type() != "Shape")
      return unimplemented(fmt::format(
          "the model has a KV cache, and its past '{}' is read by node '{}' ({}) besides the "
          "Concat that appends the new rows: kiln can only drop a past that is concatenated "
          "and measured",
          read, n.name(), n.op_type()));
    std::string past;
    for (const Found& f : found)
      if (std::find(f.chain.begin(), f.chain.end(), read) != f.chain.end()) past = f.pair.past;
    KILN_ASSIGN_OR_RETURN(std::vector<onnx::NodeProto> replaced,
                          empty_past_shape(n, *past_info.at(past), shapes++));
    for (onnx::NodeProto& r : replaced) *nodes.Add() = std::move(r);
  }
  g.mutable_node()->Swap(&nodes);
  // Inputs: the pasts go; the attention mask spans the new tokens only.
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
  for (const auto& in : g.input()) {
    if (dropped_inputs.count(in.name())) continue;
    onnx::ValueInfoProto v = in;
    if (v.name() == "attention_mask" && declared_rank(v) == 2) {
      set_dim(v, 0, batch);
      set_dim(v, 1, seq);
    }
    *inputs.Add() = std::move(v);
  }
  g.mutable_input()->Swap(&inputs);
  // Presents: [batch, heads, sequence, head_dim] of the new tokens.
  std::set<std::string> presents;
  for (const OnnxKvPair& p : pairs) presents.insert(p.present);
  for (auto& out : *g.mutable_output())
    if (presents.count(out.name())) {
      set_dim(out, 0, batch);
      set_dim(out, 2, seq);
    }
  g.clear_value_info();  // shapes recorded for the old dims
  return pairs;
}

}  // namespace kiln::compiler
