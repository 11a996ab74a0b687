// The compiler's intermediate representation: a typed dataflow graph whose dims are linear
// expressions of the run-time size S, so one compiled graph serves every size.
//
// Ops keep their ONNX (domain, op_type) names; the compiler's own fused ops use the domain "kiln"
// (compiler/ops/kiln_ops.md). Passes rewrite the graph in place.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cache/dtype.h"
#include "cache/status.h"

namespace kiln::ir {

// value = coef * S + offset. coef == 0 means a constant dim.
struct DimExpr {
  int64_t coef = 0;
  int64_t offset = 0;

  static DimExpr constant(int64_t v) { return {0, v}; }
  static DimExpr size(int64_t coef = 1, int64_t offset = 0) { return {coef, offset}; }
  bool is_constant() const { return coef == 0; }
  int64_t eval(int64_t s) const { return coef * s + offset; }
  std::string to_string() const;  // "128", "S", "4*S", "2*S+1"
  friend bool operator==(const DimExpr&, const DimExpr&) = default;
};

// Product of two dims; nullopt when both depend on S (the result would not be linear).
std::optional<DimExpr> dim_mul(const DimExpr& a, const DimExpr& b);

using Shape = std::vector<DimExpr>;
std::string shape_to_string(const Shape& shape);  // "[S, 128]"
// Number of elements; nullopt when not linear in S.
std::optional<DimExpr> shape_numel(const Shape& shape);

// Constant data (initializers, folded constants): little-endian, row-major, dtype of its Value.
struct Constant {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;
};

struct Value {
  std::string name;
  DType dtype = DType::kUnspecified;
  Shape shape;
  int producer = -1;                 // node index; -1 for graph inputs and constants
  std::optional<Constant> constant;  // set for initializers / constant-folded values
  // Known contents of a small integer tensor (rank 0 or 1) whose elements depend on S, e.g.
  // Shape(x) = [2, S, 64]. Shape folding fills it; once the producer is dropped, the value is a
  // "symbolic constant" (producer -1, no `constant`): its data is ints evaluated at the size.
  std::optional<std::vector<DimExpr>> ints;
};

using AttrValue =
    std::variant<int64_t, double, std::string, std::vector<int64_t>, std::vector<double>>;

struct Node {
  std::string name;
  std::string op;           // op_type, e.g. "MatMul", "Gemm", "Softmax", "Attention"
  std::string domain;       // "" (ONNX), "com.microsoft" or "kiln"
  std::vector<int> inputs;  // value ids; -1 marks an omitted optional input
  std::vector<int> outputs;
  std::map<std::string, AttrValue> attrs;

  int64_t attr_int(const std::string& key, int64_t fallback) const;
  double attr_float(const std::string& key, double fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;  // empty when absent
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  bool has_attr(const std::string& key) const { return attrs.contains(key); }
  // "domain.Op" for other domains, "Op" for ONNX.
  std::string qualified_op() const { return domain.empty() ? op : domain + "." + op; }
};

struct Graph {
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;  // topological order
  std::vector<int> inputs;  // graph inputs (value ids), not initializers
  std::vector<int> outputs;
  std::map<std::string, int64_t> opsets;  // domain ("" for ONNX) -> imported opset version
  // A KV-cache decoder export (frontend/onnx_kv_cache): the names of its present outputs (each
  // layer's keys and values of this call), which a generation compile drops (passes/kv_paged).
  std::vector<std::string> kv_presents;

  int find_value(std::string_view name) const;  // -1 when absent
  int add_value(Value v);                       // returns its id
};

// Structural checks: ids in range, each value produced once, topological order, shapes set.
Status graph_verify(const Graph& g);
// Deterministic text form, one node per line, for golden pass tests and `--dump-ir`.
std::string graph_to_text(const Graph& g);

}  // namespace kiln::ir
