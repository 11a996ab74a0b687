#include "compiler/frontend/onnx_kv_cache.h"

#include <fmt/format.h>

#include <map>
#include <set>

namespace kiln::compiler {

namespace {

int64_t axis_of(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute())
    if (a.name() == "axis") return a.i();
  return 0;
}

// The graph input `v` reads unchanged (through Identity, Cast and one-input Concats), or "".
std::string source_input(const std::string& v,
                         const std::map<std::string, const onnx::NodeProto*>& producer,
                         const std::set<std::string>& inputs) {
  std::string cur = v;
  for (int steps = 0; steps < 8; ++steps) {
    if (inputs.count(cur)) return cur;
    auto it = producer.find(cur);
    if (it == producer.end()) return "";
    const onnx::NodeProto& n = *it->second;
    const bool passes = n.op_type() == "Identity" || n.op_type() == "Cast" ||
                        (n.op_type() == "Concat" && n.input_size() == 1);
    if (!passes || n.input_size() < 1) return "";
    cur = n.input(0);
  }
  return "";
}

int64_t declared_rank(const onnx::ValueInfoProto& v) {
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return -1;
  return v.type().tensor_type().shape().dim_size();
}

}  // namespace

std::vector<OnnxKvPair> onnx_kv_pairs(const onnx::GraphProto& g) {
  std::map<std::string, const onnx::NodeProto*> producer;
  for (const auto& n : g.node())
    for (const auto& o : n.output()) producer[o] = &n;
  std::set<std::string> inputs;
  for (const auto& in : g.input())
    if (declared_rank(in) == 4) inputs.insert(in.name());
  std::vector<OnnxKvPair> pairs;
  for (const auto& out : g.output()) {
    if (declared_rank(out) != 4) continue;
    // The output itself, or behind an Identity/Cast.
    std::string v = out.name();
    const onnx::NodeProto* n = nullptr;
    for (int steps = 0; steps < 4; ++steps) {
      auto it = producer.find(v);
      if (it == producer.end()) break;
      n = it->second;
      if ((n->op_type() != "Identity" && n->op_type() != "Cast") || n->input_size() < 1) break;
      v = n->input(0);
      n = nullptr;
    }
    if (n == nullptr || n->op_type() != "Concat" || n->input_size() != 2) continue;
    const int64_t axis = axis_of(*n);
    if (axis != 2 && axis != -2) continue;
    const std::string past = source_input(n->input(0), producer, inputs);
    if (!past.empty()) pairs.push_back({past, out.name()});
  }
  return pairs;
}

Status onnx_check_no_kv_cache(const onnx::GraphProto& g) {
  const std::vector<OnnxKvPair> pairs = onnx_kv_pairs(g);
  if (pairs.empty()) return Status::ok_status();
  std::string listed;
  for (size_t i = 0; i < pairs.size() && i < 4; ++i)
    listed += fmt::format("{}'{}' → '{}'", i ? ", " : "", pairs[i].past, pairs[i].present);
  if (pairs.size() > 4) listed += ", ...";
  return unimplemented(fmt::format(
      "the model has a KV cache: {} past/present pairs ({}). kiln does not compile KV-cache "
      "exports yet (generation with a runtime-owned cache is planned); export the model without "
      "a cache (use_cache=False: input_ids and attention_mask in, logits out) to compile it",
      pairs.size(), listed));
}

}  // namespace kiln::compiler
