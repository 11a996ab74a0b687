#include "compiler/passes/cse.h"

#include <fmt/format.h>

#include <map>
#include <string>
#include <type_traits>

#include "compiler/passes/graph_edit.h"

namespace kiln::compiler {
namespace {

// Ops whose result is not a function of their inputs.
bool random_op(const std::string& op) {
  return op.starts_with("Random") || op == "Multinomial" || op == "Bernoulli";
}

// Constants up to this size are told apart by their contents (legalization makes one small
// constant per use, e.g. each Unsqueeze's axes); larger ones by their id.
constexpr size_t kContentKeyBytes = 64;

// The node's identity up to its output ids: op, attributes (in key order), inputs.
std::string node_key(const ir::Graph& g, const ir::Node& n) {
  std::string key = n.op + "(";
  for (int v : n.inputs) {
    const ir::Value* c = v >= 0 ? &g.values[static_cast<size_t>(v)] : nullptr;
    if (c != nullptr && c->producer < 0 && c->constant &&
        c->constant->bytes.size() <= kContentKeyBytes) {
      key += fmt::format("c{}[{}]{{{}}},", static_cast<int>(c->dtype),
                         fmt::join(c->constant->dims, "x"), fmt::join(c->constant->bytes, "."));
    } else {
      key += fmt::format("{},", v);
    }
  }
  key += fmt::format(")->{}", n.outputs.size());
  for (const auto& [name, value] : n.attrs) {
    key += "|" + name + "=";
    std::visit(
        [&key](const auto& a) {
          using A = std::decay_t<decltype(a)>;
          if constexpr (std::is_same_v<A, int64_t>) {
            key += fmt::format("i{}", a);
          } else if constexpr (std::is_same_v<A, double>) {
            key += fmt::format("f{}", a);
          } else if constexpr (std::is_same_v<A, std::string>) {
            key += fmt::format("s{}:{}", a.size(), a);
          } else {
            key += fmt::format("v{}", fmt::join(a, ","));
          }
        },
        value);
  }
  return key;
}

}  // namespace

Status cse(ir::Graph& g) {
  std::vector<bool> is_output(g.values.size(), false);
  for (int v : g.outputs) is_output[static_cast<size_t>(v)] = true;
  std::map<std::string, size_t> seen;  // key -> first node
  bool changed = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.domain.empty() || random_op(n.op) || n.outputs.empty()) continue;
    bool keep = false;  // a graph output keeps its producer
    for (int o : n.outputs) keep = keep || o < 0 || is_output[static_cast<size_t>(o)];
    if (keep) continue;
    const auto [it, fresh] = seen.emplace(node_key(g, n), i);
    if (fresh) continue;
    const ir::Node& first = g.nodes[it->second];
    const std::vector<int> outs = n.outputs;
    for (size_t k = 0; k < outs.size(); ++k) graph_replace_uses(g, outs[k], first.outputs[k]);
    changed = true;
  }
  if (!changed) return Status::ok_status();
  graph_remove_dead(g);
  return ir::graph_verify(g);
}

}  // namespace kiln::compiler
