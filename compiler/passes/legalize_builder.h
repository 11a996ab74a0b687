// Internal to legalize_variants: builds the replacement of one node — new values and nodes kept
// pending until commit() puts them in the original node's place, in order. The last nodes write
// straight into the original output values, so graph output names and every user stay as they
// were.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

using AttrMap = std::map<std::string, ir::AttrValue>;

class LegalizeBuilder {
 public:
  LegalizeBuilder(ir::Graph& g, size_t pos) : g_(g), pos_(pos), node_(g.nodes[pos]) {}

  const ir::Node& node() const { return node_; }
  int64_t opset() const;  // of the ONNX domain
  // Input / output i of the original node, -1 when absent.
  int in(size_t i) const;
  int out(size_t i) const;
  const ir::Shape& shape(int id) const { return g_.values[id].shape; }
  DType dtype(int id) const { return g_.values[id].dtype; }
  // Whether output i exists and something reads it (another node or the graph's outputs).
  bool needed(size_t i) const;

  // A node of `op` with one output: `into` when >= 0, else a new value of dtype/shape.
  int op1(const std::string& op, std::vector<int> inputs, DType dtype, ir::Shape shape,
          AttrMap attrs = {}, int into = -1, const std::string& domain = "");
  // A node with several existing or new outputs.
  void emit(const std::string& op, std::vector<int> inputs, std::vector<int> outputs,
            AttrMap attrs = {}, const std::string& domain = "");
  int new_value(const std::string& hint, DType dtype, ir::Shape shape);
  int const_i64(const std::vector<int64_t>& data);
  int scalar(DType dtype, double v);
  int constant(DType dtype, std::vector<int64_t> dims, const std::vector<double>& data);

  int reshape(int x, const std::vector<int64_t>& target, ir::Shape out, int into = -1);
  int transpose(int x, const std::vector<int64_t>& perm, int into = -1);
  int unsqueeze(int x, int64_t axis, int into = -1);
  // Elementwise binary op; the output has a's dtype and the broadcast shape (a's when equal).
  int binary(const std::string& op, int a, int b, int into = -1);
  int concat(const std::vector<int>& xs, int64_t axis, int into = -1);
  std::vector<int> split(int x, int64_t axis, const std::vector<int64_t>& sizes);
  // [B, S, H·D] → [B, H, S, D]; and back, [B, H, S, D] → [B, S, H·D].
  int to_heads(int x, int64_t heads, int into = -1);
  int from_heads(int y, int into = -1);
  // Makes `id` hold the same data as `src`: redirects its readers, or (for a graph output,
  // whose name must stay) copies through an Identity node.
  void alias(int id, int src);

  // Replaces the original node by the pending ones; returns the index just after them.
  Result<size_t> commit();

 private:
  void fail(const std::string& why) {
    if (error_.empty()) error_ = why;
  }

  ir::Graph& g_;
  size_t pos_;
  ir::Node node_;
  std::vector<ir::Node> nodes_;
  std::vector<std::pair<int, int>> aliases_;  // (id, src) redirected at commit
  std::string error_;
};

// The per-family legalizations (legalize_attention.cc, legalize_variants.cc). Each returns false,
// having built nothing, when it keeps the node as it is.
Result<bool> legalize_onnx_attention(LegalizeBuilder& b);
Result<bool> legalize_ms_mha(LegalizeBuilder& b);
Result<bool> legalize_ms_gqa(LegalizeBuilder& b);
Result<bool> legalize_ms_attention(LegalizeBuilder& b);

}  // namespace kiln::compiler
