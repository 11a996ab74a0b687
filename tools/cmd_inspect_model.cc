// kiln inspect MODEL.onnx [-c CONFIG] [--json]: the front end's view of a model.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "compiler/frontend/model_inspect.h"
#include "tools/commands.h"

namespace kiln::tools {

namespace {

using compiler::ModelInspection;
using compiler::Piece;

std::string piece_kind(const ir::Graph& g, const Piece& p) {
  if (p.kind == Piece::Kind::kCompute) return "compute";
  const ir::Node& n = g.nodes[p.nodes.front()];
  return n.domain == "kiln" && n.op == "Attention" ? "attention" : n.op;
}

std::map<std::string, int> piece_ops(const ir::Graph& g, const Piece& p) {
  std::map<std::string, int> ops;
  for (int ni : p.nodes) ++ops[g.nodes[ni].qualified_op()];
  return ops;
}

// "causal, scale 0.125, Q [2, 4, S, 16], K/V heads 2, key padding"
std::string attention_summary(const ir::Graph& g, const ir::Node& n) {
  std::vector<std::string> parts;
  if (n.attr_int("causal", 0)) parts.push_back("causal");
  parts.push_back(fmt::format("scale {:.6g}", n.attr_float("scale", 0)));
  parts.push_back("Q " + ir::shape_to_string(g.values[n.inputs[0]].shape));
  if (n.inputs.size() > 1 && n.inputs[1] >= 0)
    parts.push_back("K " + ir::shape_to_string(g.values[n.inputs[1]].shape));
  if (n.inputs.size() > 3 && n.inputs[3] >= 0) parts.push_back("mask");
  if (n.inputs.size() > 4 && n.inputs[4] >= 0) parts.push_back("key padding");
  return fmt::format("{}", fmt::join(parts, ", "));
}

nlohmann::json to_json(const ModelInspection& r) {
  nlohmann::json j;
  j["model"] = r.model.string();
  j["config"] = {{"given", r.config_given},
                 {"size_dim", r.config.size_dim},
                 {"dims", r.config.dims},
                 {"max_size", r.config.max_size},
                 {"splitting_ops", r.config.splitting_ops}};
  nlohmann::json opsets = nlohmann::json::object();
  for (const auto& [d, v] : r.opsets) opsets[d.empty() ? "ai.onnx" : d] = v;
  j["opsets"] = opsets;
  j["ops"] = r.ops;
  j["unsupported"] = nlohmann::json::array();
  for (const auto& u : r.unsupported)
    j["unsupported"].push_back({{"node", u.node}, {"op_type", u.op_type}, {"domain", u.domain}});
  j["attention_ops"] = r.attention_ops();
  j["pieces"] = nlohmann::json::array();
  j["unique_compute_pieces"] = 0;
  j["attention_notes"] = nlohmann::json::array();
  if (r.front_end) {
    for (const compiler::AttentionNote& n : r.front_end->attention_notes)
      j["attention_notes"].push_back({{"node", n.node}, {"reason", n.reason}});
    const ir::Graph& g = r.front_end->graph;
    for (const Piece& p : r.front_end->pieces)
      j["pieces"].push_back({{"kind", piece_kind(g, p)},
                             {"nodes", p.nodes.size()},
                             {"hash", p.hash},
                             {"ops", piece_ops(g, p)},
                             {"inputs", p.inputs.size()},
                             {"outputs", p.outputs.size()}});
    j["unique_compute_pieces"] = compiler::unique_compute_pieces(r.front_end->pieces);
  }
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

void print_text(const ModelInspection& r) {
  fmt::print("model {}\n", r.model.string());
  std::vector<std::string> opsets;
  for (const auto& [d, v] : r.opsets)
    opsets.push_back(fmt::format("{} {}", d.empty() ? "ai.onnx" : d, v));
  fmt::print("opsets: {}\n", fmt::join(opsets, ", "));
  std::vector<std::string> dims;
  for (const auto& [k, v] : r.config.dims) dims.push_back(fmt::format("{}={}", k, v));
  fmt::print("size: S = '{}' in [1, {}]{}{}\n", r.config.size_dim, r.config.max_size,
             dims.empty() ? "" : fmt::format(", dims {}", fmt::join(dims, ", ")),
             r.config_given ? "" : " (no config given: chosen by kiln inspect, pass -c to set)");
  int total = 0;
  std::vector<std::string> ops;
  for (const auto& [op, n] : r.ops) {
    ops.push_back(fmt::format("{} {}", op, n));
    total += n;
  }
  fmt::print("ops in the file: {} nodes, {} kinds: {}\n", total, r.ops.size(),
             fmt::join(ops, ", "));
  if (r.unsupported.empty()) {
    fmt::print("unsupported: none\n");
  } else {
    fmt::print("unsupported ({}):\n", r.unsupported.size());
    for (const auto& u : r.unsupported)
      fmt::print("  node '{}': {} (domain {}, opset {})\n", u.node, u.op_type, u.domain, u.opset);
  }
  if (!r.error.empty()) fmt::print("error: {}\n", r.error);
  if (!r.front_end) return;
  const ir::Graph& g = r.front_end->graph;
  fmt::print("attention ops: {}\n", r.attention_ops());
  for (const compiler::AttentionNote& n : r.front_end->attention_notes)
    fmt::print("  at '{}': {}\n", n.node, n.reason);
  fmt::print("pieces: {} ({} unique compute)\n", r.front_end->pieces.size(),
             compiler::unique_compute_pieces(r.front_end->pieces));
  for (size_t k = 0; k < r.front_end->pieces.size(); ++k) {
    const Piece& p = r.front_end->pieces[k];
    const std::string kind = piece_kind(g, p);
    std::string detail;
    if (kind == "attention") {
      detail = attention_summary(g, g.nodes[p.nodes.front()]);
    } else {
      std::vector<std::string> ops_text;
      for (const auto& [op, n] : piece_ops(g, p)) ops_text.push_back(fmt::format("{} {}", op, n));
      detail = fmt::format("{}", fmt::join(ops_text, ", "));
    }
    fmt::print("  {:>2} {:<9} {:>4} node{}  {}  {}\n", k, kind, p.nodes.size(),
               p.nodes.size() == 1 ? " " : "s", p.hash.substr(0, 12), detail);
  }
}

}  // namespace

int cmd_inspect_model(const std::string& model, const std::string& config_path, bool json) {
  std::optional<compiler::CompileConfig> config;
  if (!config_path.empty()) {
    Result<compiler::CompileConfig> c = compiler::config_load(config_path);
    if (!c.ok()) {
      fmt::print(stderr, "kiln inspect: {}\n", c.status().message());
      return kExitError;
    }
    config = std::move(c).value();
  }
  Result<ModelInspection> r = compiler::model_inspect(model, config ? &*config : nullptr);
  if (!r.ok()) {
    fmt::print(stderr, "kiln inspect: {}\n", r.status().message());
    return kExitError;
  }
  if (json) {
    fmt::print("{}\n", to_json(*r).dump(1));
  } else {
    print_text(*r);
  }
  return r->front_end ? kExitOk : kExitError;
}

}  // namespace kiln::tools
