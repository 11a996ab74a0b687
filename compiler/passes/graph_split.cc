#include "compiler/passes/graph_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "cache/file_hash.h"

namespace kiln::compiler {

namespace {

// Constants up to this many elements are hashed by value (scales, epsilons, small shapes).
constexpr int64_t kHashByValueElements = 64;

std::string attr_text(const ir::AttrValue& a) {
  struct V {
    std::string operator()(int64_t v) const { return std::to_string(v); }
    std::string operator()(double v) const { return fmt::format("{:.17g}", v); }
    std::string operator()(const std::string& v) const { return "\"" + v + "\""; }
    std::string operator()(const std::vector<int64_t>& v) const {
      return fmt::format("[{}]", fmt::join(v, ","));
    }
    std::string operator()(const std::vector<double>& v) const {
      std::vector<std::string> s;
      for (double x : v) s.push_back(fmt::format("{:.17g}", x));
      return fmt::format("[{}]", fmt::join(s, ","));
    }
  };
  return std::visit(V{}, a);
}

std::string type_text(const ir::Value& v) {
  return fmt::format("{}{}", dtype_name(v.dtype), ir::shape_to_string(v.shape));
}

// The structural text of one piece; its hash is the piece's hash.
std::string piece_text(const ir::Graph& g, const Piece& p) {
  std::map<int, std::string> local;  // value id -> local name
  std::string text;
  auto ref = [&](int id) -> std::string {
    if (id < 0) return "none";
    if (auto it = local.find(id); it != local.end()) return it->second;
    const ir::Value& v = g.values[id];
    std::string name;
    if (v.constant) {
      int64_t n = 1;
      for (int64_t d : v.constant->dims) n *= d;
      name = n <= kHashByValueElements
                 ? fmt::format("c{}:{}=<{}>", local.size(), type_text(v),
                               cache::hash128_hex(std::string_view(
                                   reinterpret_cast<const char*>(v.constant->bytes.data()),
                                   v.constant->bytes.size())))
                 : fmt::format("w{}:{}", local.size(), type_text(v));
    } else if (v.ints && v.producer < 0) {
      std::vector<std::string> e;
      for (const ir::DimExpr& d : *v.ints) e.push_back(d.to_string());
      name = fmt::format("s{}:{}=[{}]", local.size(), type_text(v), fmt::join(e, ","));
    } else {
      name = fmt::format("in{}:{}", local.size(), type_text(v));
    }
    local[id] = name;
    text += "def " + name + "\n";
    return name;
  };
  for (int ni : p.nodes) {
    const ir::Node& n = g.nodes[ni];
    std::vector<std::string> ins, outs, attrs;
    for (int id : n.inputs) ins.push_back(ref(id));
    for (int id : n.outputs) {
      const std::string name = fmt::format("v{}:{}", local.size(), type_text(g.values[id]));
      local[id] = name;
      outs.push_back(name);
    }
    for (const auto& [k, v] : n.attrs) attrs.push_back(k + "=" + attr_text(v));
    text += fmt::format("{} = {}({}) {{{}}}\n", fmt::join(outs, ","), n.qualified_op(),
                        fmt::join(ins, ","), fmt::join(attrs, ","));
  }
  std::vector<std::string> outs;
  for (int id : p.outputs) outs.push_back(local.count(id) ? local[id] : "?");
  text += fmt::format("out {}\n", fmt::join(outs, ","));
  return text;
}

}  // namespace

bool piece_is_split_op(const ir::Node& n, const std::vector<std::string>& splitting_ops) {
  for (const std::string& s : splitting_ops) {
    if (s == "attention" && n.domain == "kiln" && (n.op == "Attention" || n.op == "PagedAttention"))
      return true;
    if (s != "attention" && n.domain.empty() && n.op == s) return true;
  }
  return false;
}

Result<std::vector<Piece>> graph_split(const ir::Graph& g,
                                       const std::vector<std::string>& splitting_ops) {
  KILN_RETURN_IF_ERROR(ir::graph_verify(g));
  // Slot of each node: split op j (in topological order) sits in slot 2j+1; a compute node in
  // the even slot right after the latest split op it depends on (0 when none).
  std::vector<int> slot(g.nodes.size(), 0);
  int splits = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    int s = 0;
    for (int in : n.inputs) {
      if (in < 0) continue;
      const int p = g.values[in].producer;
      if (p < 0) continue;
      s = std::max(s, slot[p] % 2 == 1 ? slot[p] + 1 : slot[p]);
    }
    if (piece_is_split_op(n, splitting_ops)) {
      const int mine = 2 * splits + 1;
      if (s > mine)
        return internal_error(fmt::format("node '{}' depends on a later split op", n.name));
      slot[i] = mine;
      ++splits;
    } else {
      slot[i] = s;
    }
  }
  std::map<int, Piece> by_slot;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Piece& p = by_slot[slot[i]];
    p.kind = slot[i] % 2 == 1 ? Piece::Kind::kSplit : Piece::Kind::kCompute;
    p.nodes.push_back(static_cast<int>(i));
  }
  std::vector<Piece> pieces;
  for (auto& [s, p] : by_slot) pieces.push_back(std::move(p));

  // Inputs and outputs of each piece.
  std::vector<int> piece_of(g.nodes.size(), -1);
  for (size_t k = 0; k < pieces.size(); ++k)
    for (int ni : pieces[k].nodes) piece_of[ni] = static_cast<int>(k);
  std::set<int> graph_outputs(g.outputs.begin(), g.outputs.end());
  std::vector<std::set<int>> exported(pieces.size());
  for (size_t k = 0; k < pieces.size(); ++k) {
    std::set<int> seen;
    for (int ni : pieces[k].nodes)
      for (int in : g.nodes[ni].inputs) {
        if (in < 0) continue;
        const ir::Value& v = g.values[in];
        if (v.constant || (v.ints && v.producer < 0)) continue;
        const int from = v.producer < 0 ? -1 : piece_of[v.producer];
        if (from == static_cast<int>(k)) continue;
        if (seen.insert(in).second) pieces[k].inputs.push_back(in);
        if (from >= 0) exported[from].insert(in);
      }
  }
  for (size_t k = 0; k < pieces.size(); ++k) {
    for (int ni : pieces[k].nodes)
      for (int o : g.nodes[ni].outputs)
        if (exported[k].contains(o) || graph_outputs.contains(o)) pieces[k].outputs.push_back(o);
    pieces[k].hash = cache::hash128_hex(piece_text(g, pieces[k]));
  }
  return pieces;
}

ir::Graph graph_in_piece_order(const ir::Graph& g, const std::vector<Piece>& pieces) {
  ir::Graph out = g;
  out.nodes.clear();
  for (const Piece& p : pieces)
    for (int ni : p.nodes) out.nodes.push_back(g.nodes[ni]);
  for (ir::Value& v : out.values)
    if (v.producer >= 0) v.producer = -1;
  for (size_t i = 0; i < out.nodes.size(); ++i)
    for (int o : out.nodes[i].outputs) out.values[o].producer = static_cast<int>(i);
  return out;
}

int unique_compute_pieces(const std::vector<Piece>& pieces) {
  std::set<std::string> hashes;
  for (const Piece& p : pieces)
    if (p.kind == Piece::Kind::kCompute) hashes.insert(p.hash);
  return static_cast<int>(hashes.size());
}

}  // namespace kiln::compiler
