// Read-only helpers for the fusion passes' matchers: who produces and who reads a value,
// constant scalars, axes of reductions, no-op Casts. A matcher walks the imported IR (constants
// and shape subgraphs already folded), checks every constant and shape it relies on, and only
// then rewrites; anything it does not recognise stays as it is.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

// A read-only view of a graph for matchers: who computes and who reads each value, and what
// the constants hold. Built once per pass; node indexes stay valid until the pass edits.
class PatternView {
 public:
  explicit PatternView(const ir::Graph& g);

  const ir::Graph& graph() const { return g_; }
  // The value with id v; an empty, untyped value for -1 or an id out of range (an omitted
  // optional input), so matchers may look at any input without checking it first.
  const ir::Value& value(int v) const;
  // The node computing v; nullptr for graph inputs, constants and -1.
  const ir::Node* producer(int v) const;
  // The producer when it is the ONNX-domain op `op`, else nullptr.
  const ir::Node* producer(int v, std::string_view op) const;
  // Index of the node computing v, -1 when none.
  int producer_index(int v) const;
  // Node indexes reading v (a node reading it twice appears twice).
  const std::vector<int>& users(int v) const;
  // The one node reading v when v is read exactly once, is not a graph output, and that node
  // is the ONNX-domain op `op`; else nullptr.
  const ir::Node* sole_user(int v, std::string_view op) const;
  bool is_graph_output(int v) const;

  // Decoded constant data, nullopt when v is not constant.
  std::optional<RefTensor> constant(int v) const;
  // The value of a constant whose elements are all equal (at least one, at most 65536: larger
  // constants are weights, not scalars), nullopt otherwise.
  std::optional<double> splat(int v) const;
  // The other input of a two-input node that reads v (the first occurrence); -1 when the node
  // does not read v or does not have exactly two inputs.
  static int other_input(const ir::Node& n, int v);
  // v with every Cast that keeps the dtype (a no-op) stripped, walking backwards.
  int skip_noop_casts(int v) const;
  // Axes a reduce node reduces (attribute or constant input 1, per opset), normalised to
  // [0, rank); nullopt when unknown. Empty axes with noop_with_empty_axes = 0 mean all axes.
  std::optional<std::vector<int64_t>> reduce_axes(const ir::Node& n) const;
  // True for a ReduceMean over exactly the last axis with keepdims = 1.
  bool is_mean_last_axis_keepdims(const ir::Node& n) const;
  // The graph's opset for the node's domain (1 when not imported).
  int64_t opset(const ir::Node& n) const;

 private:
  const ir::Graph& g_;
  std::vector<std::vector<int>> users_;
  std::vector<char> is_output_;
};

// |a - b| <= rtol·|b| (constants written by exporters in float32).
bool near_value(double a, double b, double rtol = 1e-4);
// Whether the op's shape inference for `n` (whose output values already hold the dtype and
// shape the node must produce) agrees with them. The output values are left unchanged.
bool infer_agrees(ir::Graph& g, const ir::Node& n, int64_t max_size);

// Unsqueeze's axes (attribute, or constant input 1); empty when unknown.
std::vector<int64_t> unsqueeze_axes(const PatternView& pv, const ir::Node& n);
// GQA: v = Reshape(Expand(Unsqueeze(kv, axis 2) → [B, Hkv, n, S, D]) → [B, Hkv·n, S, D]
// repeats each kv head n times (query head h reads kv head h / n). Returns kv and sets n, or -1.
// Keys the dynamo exporter transposed for Q·Kᵀ through a [B·H, S, D] view (and fuse_attention
// transposed back) are followed through that identity first.
int unrepeat_kv(const PatternView& pv, int v, int64_t& n);

// A node's integer list: attribute `attr` when the node has it (older opsets), else the constant
// input `input`; empty when that input is absent. Clears `ok` when the input is not constant.
std::vector<int64_t> const_ints(const PatternView& pv, const ir::Node& n, const char* attr,
                                size_t input, bool& ok);

// The source x and the element range [lo, hi) of x's last axis (constant length d) that v is,
// when v is a unit-step Slice of the last axis or one half of a two-way Split of it; false
// otherwise, and for an empty Slice unless `allow_empty`.
bool last_axis_piece(const PatternView& pv, int v, int& x, int64_t& lo, int64_t& hi,
                     bool allow_empty = false);

}  // namespace kiln::compiler
