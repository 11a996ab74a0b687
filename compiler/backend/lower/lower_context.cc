#include "compiler/backend/lower/lower_context.h"

#include <fmt/format.h>

#include "cache/file_hash.h"

namespace kiln::compiler {

LowerContext::LowerContext(ir::Graph& g, Precision precision, std::vector<int> piece_of_node,
                           std::vector<LoweredPiece> pieces)
    : g_(g),
      precision_(precision),
      done_(g.nodes.size(), false),
      piece_of_node_(std::move(piece_of_node)),
      steps_by_piece_(pieces.size()) {
  prog_.pieces = std::move(pieces);
  consumers_.resize(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in >= 0) consumers_[in].push_back(static_cast<int>(i));
  is_output_.assign(g.values.size(), false);
  for (int v : g.outputs) is_output_[v] = true;
}

bool LowerContext::is_constant(int v) const {
  const ir::Value& val = g_.values[v];
  return val.constant.has_value() || (val.producer < 0 && val.ints.has_value());
}

int LowerContext::sole_consumer(int v) const {
  if (is_output_[v] || consumers_[v].size() != 1) return -1;
  return done_[consumers_[v][0]] ? -1 : consumers_[v][0];
}

int LowerContext::new_value(const std::string& name, DType dtype, ir::Shape shape,
                            std::optional<ir::Constant> constant) {
  ir::Value v;
  v.name = name;
  v.dtype = dtype;
  v.shape = std::move(shape);
  v.constant = std::move(constant);
  const int id = g_.add_value(std::move(v));
  consumers_.emplace_back();
  is_output_.push_back(false);
  return id;
}

void LowerContext::alias(int v, int base) { prog_.aliases[v] = resolve(base); }

int LowerContext::resolve(int v) const {
  for (auto it = prog_.aliases.find(v); it != prog_.aliases.end(); it = prog_.aliases.find(v))
    v = it->second;
  return v;
}

int LowerContext::add_kernel(const std::string& prefix, KernelDef def) {
  std::string text = fmt::format("{}\n{}\n", prefix, def.max_threads);
  for (const auto& p : def.params) text += p + '\n';
  text += def.body;
  if (auto it = kernel_index_.find(text); it != kernel_index_.end()) return it->second;
  def.symbol = fmt::format("{}_{:016x}", prefix, cache::hash64(text.data(), text.size()));
  prog_.kernels.push_back(std::move(def));
  const int index = static_cast<int>(prog_.kernels.size()) - 1;
  kernel_index_.emplace(std::move(text), index);
  return index;
}

void LowerContext::emit(int node, LaunchStep step) {
  const int piece = node >= 0 && node < static_cast<int>(piece_of_node_.size())
                        ? piece_of_node_[node]
                        : static_cast<int>(steps_by_piece_.size()) - 1;
  steps_by_piece_[piece].push_back(std::move(step));
}

int LowerContext::take_deferred_norm(int y) {
  auto it = deferred_norms_.find(y);
  if (it == deferred_norms_.end()) return -1;
  const int node = it->second;
  deferred_norms_.erase(it);
  return node;
}

LoweredProgram LowerContext::finish() {
  prog_.steps.clear();
  for (size_t p = 0; p < steps_by_piece_.size(); ++p) {
    prog_.pieces[p].first_step = prog_.steps.size();
    for (auto& s : steps_by_piece_[p]) prog_.steps.push_back(std::move(s));
  }
  return std::move(prog_);
}

std::string lower_error_prefix(const ir::Node& n) {
  return fmt::format("node '{}' ({})", n.name, n.qualified_op());
}

Status lower_unsupported(const ir::Node& n, const std::string& why) {
  return unimplemented(fmt::format("{}: {}", lower_error_prefix(n), why));
}

}  // namespace kiln::compiler
