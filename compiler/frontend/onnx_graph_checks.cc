#include "compiler/frontend/onnx_graph_checks.h"

#include <fmt/format.h>

#include <functional>
#include <queue>
#include <set>

#include "compiler/ir/op_registry.h"

namespace kiln::compiler {

namespace {
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 24;
constexpr int64_t kMaxMsOpset = 1;     // com.microsoft has had one version
constexpr int64_t kMinIrVersion = 3;   // the first with opset_import
constexpr int64_t kMaxIrVersion = 12;  // opset 24
}  // namespace

bool onnx_is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

std::string onnx_node_label(const std::string& name, const onnx::NodeProto& n) {
  if (onnx_is_default_domain(n.domain())) return fmt::format("node '{}' ({})", name, n.op_type());
  return fmt::format("node '{}' ({}.{})", name, n.domain(), n.op_type());
}

// Node names as kiln uses them: empty or repeated names become "<op>_<index>".
std::vector<std::string> onnx_node_names(const onnx::GraphProto& g) {
  std::set<std::string> used;
  for (const auto& n : g.node()) used.insert(n.name());
  std::vector<std::string> names;
  std::set<std::string> taken;
  for (int i = 0; i < g.node_size(); ++i) {
    std::string name = g.node(i).name();
    if (name.empty() || taken.contains(name)) {
      const std::string stem = fmt::format("{}_{}", g.node(i).op_type(), i);
      name = stem;
      for (int k = 2; used.contains(name) || taken.contains(name); ++k)
        name = fmt::format("{}_{}", stem, k);
    }
    taken.insert(name);
    names.push_back(std::move(name));
  }
  return names;
}

Result<std::map<std::string, int64_t>> onnx_check_opsets(const onnx::ModelProto& m) {
  if (m.ir_version() < kMinIrVersion || m.ir_version() > kMaxIrVersion)
    return unimplemented(fmt::format("ir_version {} is not supported (kiln reads {} to {})",
                                     m.ir_version(), kMinIrVersion, kMaxIrVersion));
  std::map<std::string, int64_t> opsets;
  for (const auto& o : m.opset_import()) {
    const std::string domain = onnx_is_default_domain(o.domain()) ? "" : o.domain();
    if (!opsets.emplace(domain, o.version()).second)
      return invalid_argument(fmt::format("the domain '{}' is imported twice in opset_import",
                                          domain.empty() ? "ai.onnx" : domain));
  }
  auto it = opsets.find("");
  if (it == opsets.end()) return invalid_argument("no opset_import for the default ONNX domain");
  if (it->second < kMinOpset || it->second > kMaxOpset)
    return unimplemented(
        fmt::format("default-domain opset {} is not supported (kiln reads {} to {})", it->second,
                    kMinOpset, kMaxOpset));
  if (auto ms = opsets.find(std::string(kDomainMs));
      ms != opsets.end() && (ms->second < 1 || ms->second > kMaxMsOpset))
    return unimplemented(
        fmt::format("com.microsoft opset {} is not supported (kiln reads 1)", ms->second));
  return opsets;
}

std::vector<OnnxUnsupported> onnx_unsupported_ops(const onnx::GraphProto& g,
                                                  const std::vector<std::string>& names,
                                                  const std::map<std::string, int64_t>& opsets) {
  std::vector<OnnxUnsupported> bad;
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    bool subgraph = false;
    for (const auto& a : n.attribute())
      subgraph |= a.type() == onnx::AttributeProto::GRAPH ||
                  a.type() == onnx::AttributeProto::GRAPHS || a.has_g() || a.graphs_size() > 0;
    const std::string domain = onnx_is_default_domain(n.domain()) ? "" : n.domain();
    const bool known_domain = domain.empty() || domain == kDomainMs;
    if (!subgraph && known_domain && op_find(domain, n.op_type())) continue;
    auto it = opsets.find(domain);
    bad.push_back({names[i], n.op_type(), domain.empty() ? "ai.onnx" : domain,
                   it == opsets.end() ? -1 : it->second, subgraph});
  }
  return bad;
}

// Every node kiln cannot compile, listed at once with its name, op type, domain and opset.
Status onnx_check_ops(const onnx::GraphProto& g, const std::vector<std::string>& names,
                      const std::map<std::string, int64_t>& opsets) {
  std::vector<std::string> bad;
  for (const OnnxUnsupported& u : onnx_unsupported_ops(g, names, opsets))
    bad.push_back(fmt::format("'{}' ({}, domain '{}', {}{})", u.node, u.op_type, u.domain,
                              u.opset < 0 ? "not imported" : fmt::format("opset {}", u.opset),
                              u.subgraph ? ", with a subgraph" : ""));
  if (bad.empty()) return Status::ok_status();
  return unimplemented(fmt::format("{} unsupported op{}: {}", bad.size(),
                                   bad.size() == 1 ? "" : "s", fmt::join(bad, ", ")));
}

Result<std::vector<int>> onnx_topo_order(const onnx::GraphProto& gp,
                                         const std::vector<std::string>& names,
                                         const std::map<std::string, std::string>& defined) {
  const int n = gp.node_size();
  std::map<std::string, int> producer;
  for (int i = 0; i < n; ++i)
    for (const auto& o : gp.node(i).output()) {
      if (o.empty()) continue;
      const std::string who = onnx_node_label(names[i], gp.node(i));
      if (auto it = defined.find(o); it != defined.end())
        return invalid_argument(
            fmt::format("value '{}' is produced twice: by {} and by {}", o, it->second, who));
      if (auto it = producer.find(o); it != producer.end())
        return invalid_argument(fmt::format("value '{}' is produced twice: by {} and by {}", o,
                                            onnx_node_label(names[it->second], gp.node(it->second)),
                                            who));
      producer[o] = i;
    }
  std::vector<std::vector<int>> users(n);
  std::vector<int> indegree(n, 0);
  for (int i = 0; i < n; ++i)
    for (const auto& in : gp.node(i).input()) {
      if (in.empty()) continue;  // an omitted optional input
      if (auto it = producer.find(in); it != producer.end()) {
        users[it->second].push_back(i);
        ++indegree[i];
      } else if (!defined.contains(in)) {
        return invalid_argument(fmt::format(
            "{}: input '{}' is produced by nothing (not a graph input, initializer or node output)",
            onnx_node_label(names[i], gp.node(i)), in));
      }
    }
  // Kahn's algorithm, taking the lowest original index first so sorted models keep their order.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (indegree[i] == 0) ready.push(i);
  std::vector<int> order;
  while (!ready.empty()) {
    const int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[i])
      if (--indegree[u] == 0) ready.push(u);
  }
  if (static_cast<int>(order.size()) == n) return order;
  // Walk backwards through unscheduled producers until a node repeats: it lies on a cycle.
  int at = 0;
  while (indegree[at] == 0) ++at;
  std::vector<char> seen(n, 0);
  while (!seen[at]) {
    seen[at] = 1;
    for (const auto& in : gp.node(at).input()) {
      auto it = producer.find(in);
      if (!in.empty() && it != producer.end() && indegree[it->second] > 0) {
        at = it->second;
        break;
      }
    }
  }
  return invalid_argument(
      fmt::format("the graph has a cycle through {}", onnx_node_label(names[at], gp.node(at))));
}

}  // namespace kiln::compiler
