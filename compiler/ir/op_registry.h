// The op registry: for every (domain, op_type) the compiler understands, how to infer its outputs
// (dtype, symbolic shape, and — for small integer tensors — symbolic contents) and how the CPU
// reference computes it. One family of ops per file under compiler/ops/; each family adds its
// OpDefs in an ops_register_<family>() function listed in op_registry.cc.
//
// Domains: "" (ONNX default, also spelled "ai.onnx" in files), "com.microsoft", and "kiln" for
// the compiler's own fused ops (kiln.Attention, kiln.Rotary), whose exact semantics are written
// in compiler/ops/kiln_ops.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "compiler/ir/ir.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::compiler {

inline constexpr std::string_view kDomainOnnx = "";
inline constexpr std::string_view kDomainMs = "com.microsoft";
inline constexpr std::string_view kDomainKiln = "kiln";

// What an infer function sees: the graph, the node, and what is known about its inputs.
class InferContext {
 public:
  InferContext(ir::Graph& g, const ir::Node& n, int64_t opset, int64_t max_size)
      : g_(g), n_(n), opset_(opset), max_size_(max_size) {}

  const ir::Node& node() const { return n_; }
  int64_t opset() const { return opset_; }        // of the node's domain
  int64_t max_size() const { return max_size_; }  // S ranges over [1, max_size]

  size_t num_inputs() const { return n_.inputs.size(); }
  bool has_input(size_t i) const { return i < n_.inputs.size() && n_.inputs[i] >= 0; }
  // The i-th input, which must be present (checked by require()).
  const ir::Value& input(size_t i) const { return g_.values[n_.inputs[i]]; }
  // Known contents of an integer (int64/int32/bool) input of rank <= 1: constant data or
  // symbolic elements (e.g. a Shape result). nullopt when not known at compile time.
  std::optional<std::vector<ir::DimExpr>> input_ints(size_t i) const;
  // Decoded constant data of input i (any dtype), nullopt when it is not a constant.
  std::optional<RefTensor> input_constant(size_t i) const;

  // Errors unless inputs [0, min_in) are present, at most max_in inputs and the outputs fit.
  Status require(size_t min_in, size_t max_in, size_t min_out, size_t max_out) const;
  // Sets output k. `ints` records symbolic contents of a rank-0/1 integer output.
  void set_output(size_t k, DType dtype, ir::Shape shape,
                  std::optional<std::vector<ir::DimExpr>> ints = std::nullopt);
  size_t num_outputs() const { return n_.outputs.size(); }

  // An invalid_argument error prefixed with "node 'NAME' (OP): ".
  Status error(std::string_view msg) const;
  Status unsupported(std::string_view msg) const;  // unimplemented(), same prefix

 private:
  ir::Graph& g_;
  const ir::Node& n_;
  int64_t opset_;
  int64_t max_size_;
};

using InferFn = Status (*)(InferContext&);
// Reference kernel: concrete float64 tensors in (nullptr for an omitted optional input), one
// RefTensor per node output out (set each output's dtype).
using RefFn = Result<std::vector<RefTensor>> (*)(const ir::Node&,
                                                 const std::vector<const RefTensor*>&);

struct OpDef {
  std::string_view domain;
  std::string_view op;
  InferFn infer = nullptr;
  RefFn ref = nullptr;
  // Constant folding runs the reference when every input is constant. False for ops whose
  // result must stay a node (none today; kept for random or stateful ops).
  bool foldable = true;
};

// nullptr when (domain, op) is not supported; "ai.onnx" is the same as "".
const OpDef* op_find(std::string_view domain, std::string_view op);
// Every registered op, sorted by domain then op (for `kiln inspect` and docs).
std::vector<const OpDef*> op_all();

// The families (one per file under compiler/ops/).
void ops_register_elementwise(std::vector<OpDef>& defs);  // ops/elementwise.cc
void ops_register_reduce(std::vector<OpDef>& defs);       // ops/reduce.cc
void ops_register_norm(std::vector<OpDef>& defs);         // ops/norm.cc
void ops_register_matmul(std::vector<OpDef>& defs);       // ops/matmul.cc
void ops_register_layout(std::vector<OpDef>& defs);       // ops/layout.cc
void ops_register_gather(std::vector<OpDef>& defs);       // ops/gather.cc
void ops_register_shape(std::vector<OpDef>& defs);        // ops/shape.cc
void ops_register_attention(std::vector<OpDef>& defs);    // ops/attention.cc
void ops_register_rotary(std::vector<OpDef>& defs);       // ops/rotary.cc
void ops_register_contrib(std::vector<OpDef>& defs);      // ops/contrib.cc

}  // namespace kiln::compiler
