// The state every lowering rule works on: the graph, which nodes are done, consumers, views,
// the kernels generated so far (deduplicated) and the steps emitted so far, by piece.
//
// A rule (compiler/backend/lower/lower_rules.h) lowers one node, and may absorb nodes it fuses with
// (mark_done): a GEMM takes the bias Add and the activation after it, an elementwise chain
// takes its successors, attention takes the Reshape/Transpose views around it. Rules run in the
// graph's (piece) order; a rule may look ahead at pending consumers but never back at a node
// that is already lowered.
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/config.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

class LowerContext {
 public:
  // `piece_of_node[i]`: the piece node i belongs to; `pieces` gives each piece's kind and hash.
  LowerContext(ir::Graph& g, Precision precision, std::vector<int> piece_of_node,
               std::vector<LoweredPiece> pieces);

  ir::Graph& graph() { return g_; }
  const ir::Graph& graph() const { return g_; }
  const ir::Node& node(int i) const { return g_.nodes[i]; }
  const ir::Value& value(int v) const { return g_.values[v]; }
  const ir::Shape& shape(int v) const { return g_.values[v].shape; }
  DType dtype(int v) const { return g_.values[v].dtype; }
  Precision precision() const { return precision_; }
  // Requests may be padded up to a captured size (the config has capture sizes): rules must
  // keep padding rows out of real rows.
  bool padded_runs() const { return padded_runs_; }
  void set_padded_runs(bool padded) { padded_runs_ = padded; }
  // The largest size S (config max_size; 0: unknown).
  int64_t max_size() const { return max_size_; }
  void set_max_size(int64_t max_size) { max_size_ = max_size; }
  // A generation program's KV cache (config `kv_cache:`): the paged attention rule's block size
  // and table width. Null otherwise.
  const KvCacheConfig* kv_cache() const { return kv_cache_; }
  void set_kv_cache(const KvCacheConfig* kv) { kv_cache_ = kv; }
  // Compile and capture sizes, ascending, and the largest M a skinny GEMM takes at them
  // (LowerOptions::planned_sizes, skinny_max_m, skinny_max_m_timed): skinny_max_m_at(p) at size
  // p, skinny_max_m() at the most.
  const std::vector<int64_t>& planned_sizes() const { return planned_sizes_; }
  int64_t skinny_max_m() const { return std::max(skinny_max_m_, skinny_max_m_timed_); }
  int64_t skinny_max_m_at(int64_t p) const {
    return specialised(p) ? std::max(skinny_max_m_, skinny_max_m_timed_) : skinny_max_m_;
  }
  void set_planned_sizes(std::vector<int64_t> sizes, int64_t skinny_max_m,
                         int64_t skinny_max_m_timed) {
    planned_sizes_ = std::move(sizes);
    skinny_max_m_ = skinny_max_m;
    skinny_max_m_timed_ = skinny_max_m_timed;
  }
  // Whether kernels get an entry specialised for padded size `size` (LowerOptions::
  // specialised_sizes, config compile_sizes).
  bool specialised(int64_t size) const {
    return std::find(specialised_sizes_.begin(), specialised_sizes_.end(), size) !=
           specialised_sizes_.end();
  }
  void set_specialised_sizes(std::vector<int64_t> sizes) { specialised_sizes_ = std::move(sizes); }
  // Rules may absorb other nodes (LowerOptions::fuse; false at compilation level 0).
  bool fuse() const { return fuse_; }
  void set_fuse(bool fuse) { fuse_ = fuse; }
  int64_t rank(int v) const { return static_cast<int64_t>(g_.values[v].shape.size()); }

  // Constant data, or a symbolic constant (`Value::ints` without producer): never a step input.
  bool is_constant(int v) const;
  bool is_graph_output(int v) const { return is_output_[v]; }
  bool done(int node) const { return done_[node]; }
  int piece_of(int node) const { return piece_of_node_[node]; }  // graph_split's piece index
  void mark_done(int node) { done_[node] = true; }
  const std::vector<int>& consumers(int v) const { return consumers_[v]; }
  // The single consumer of `v` still to be lowered, when `v` is not a graph output; else -1.
  int sole_consumer(int v) const;
  // `v` is computed before node `node` runs (a graph input, a constant, or an earlier result).
  bool available_at(int v, int node) const { return g_.values[v].producer < node; }

  // A new intermediate value (e.g. a GEMM result before an epilogue add), or a new constant
  // (e.g. a pre-scaled bias).
  int new_value(const std::string& name, DType dtype, ir::Shape shape,
                std::optional<ir::Constant> constant = std::nullopt);

  // `v` is a view of `base` with the same bytes (Reshape, Squeeze, Unsqueeze, Flatten): steps
  // that read or write v use base's buffer. resolve() follows the chain.
  void alias(int v, int base);
  int resolve(int v) const;

  // Adds a kernel unless an identical one (params, body, max_threads) exists; names it
  // "<prefix>_<16 hex digits of the hash of its text>" so the names depend only on the code.
  // Returns its index in program().kernels.
  int add_kernel(const std::string& prefix, KernelDef def);
  // Appends a step to the piece of `node` (the node whose rule emits it). Kernel and GEMM
  // arguments must name resolved values (resolve()).
  void emit(int node, LaunchStep step);

  // Norms left to the GEMM that reads their output (lower_reduce.cc defers such a norm; the
  // GEMM's rule emits it, and its skinny kernel applies the norm itself where it runs): keyed by
  // the norm's output value, the norm's node.
  void defer_norm(int y, int node) { deferred_norms_[y] = node; }
  // The norm deferred for value `y`, taken off the list; -1 when none.
  int take_deferred_norm(int y);
  // Deferred norms no GEMM took (finish() leaves them unlowered: the caller fails).
  size_t deferred_norms_left() const { return deferred_norms_.size(); }

  const LoweredProgram& program() const { return prog_; }
  // The program with its steps grouped by piece, in piece order.
  LoweredProgram finish();

 private:
  ir::Graph& g_;
  Precision precision_;
  bool padded_runs_ = true;
  int64_t max_size_ = 0;
  const KvCacheConfig* kv_cache_ = nullptr;
  std::vector<int64_t> planned_sizes_;
  std::vector<int64_t> specialised_sizes_;
  int64_t skinny_max_m_ = 0;
  int64_t skinny_max_m_timed_ = 0;
  bool fuse_ = true;
  std::vector<bool> done_;
  std::vector<std::vector<int>> consumers_;
  std::vector<bool> is_output_;
  std::vector<int> piece_of_node_;
  std::vector<std::vector<LaunchStep>> steps_by_piece_;
  std::map<std::string, int> kernel_index_;  // text -> index
  std::map<int, int> deferred_norms_;        // norm output -> norm node
  LoweredProgram prog_;
};

// Helpers every rule uses.
std::string lower_error_prefix(const ir::Node& n);  // "node 'name' (Op)"
Status lower_unsupported(const ir::Node& n, const std::string& why);  // kUnimplemented

}  // namespace kiln::compiler
