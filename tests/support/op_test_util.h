// Helpers shared by the op-family tests (tests/compiler/ops): tensors written out by value,
// models in ONNX's textual syntax imported and run through the reference, expected errors, and
// graphs of one node built directly (for ops the importer refuses, like the kiln domain's).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/frontend/onnx_import.h"
#include "compiler/ir/ir.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::testing {

// The size dim S, and a constant dim: shapes the tests expect read (ir::Shape{S, C(8)}).
inline const ir::DimExpr S = ir::DimExpr::size();
ir::DimExpr C(int64_t v);
// A shape of constant dims, -1 standing for S: sym_shape({2, -1, 8}) is [2, S, 8].
ir::Shape sym_shape(const std::vector<int64_t>& dims);

// A tensor with these dims and values, float32 unless `dt` says otherwise.
compiler::RefTensor T(std::vector<int64_t> dims, std::vector<double> data, DType dt = DType::kF32);
// 0, 1, 2, ... as a float tensor of `dims`.
compiler::RefTensor iota(std::vector<int64_t> dims);

// import_text_ok of `text` without folding, so that nodes whose inputs are constants stay.
ir::Graph import_unfolded(const std::string& text, const std::string& size_dim = "N");
// Runs `g` through the reference at size `s`; every output by name (none on an error, which
// fails the test).
std::map<std::string, compiler::RefTensor> run(
    const ir::Graph& g, int64_t s, const std::map<std::string, compiler::RefTensor>& in);

// `st` is an error with `code` and a message containing every needle; `what` names the case.
void expect_error_status(const Status& st, StatusCode code, const std::vector<std::string>& needles,
                         const std::string& what = "");
// Importing `text` (a whole model in ONNX's textual syntax) fails as expect_error_status says.
void expect_import_error(const std::string& text, StatusCode code,
                         const std::vector<std::string>& needles,
                         const std::string& size_dim = "N");

// ---- models whose outputs have no declared shape -------------------------------------------

// The model header the opset-17 tests put before a graph.
inline const std::string kOpset17Head = R"(<ir_version: 8, opset_import: ["" : 17]> )";

// Imports a model in ONNX's textual syntax with the graph outputs' shapes cleared, so each test
// states the shapes it expects itself (the syntax has no "unknown shape" for a declared output).
Result<ir::Graph> import_loose(const std::string& text, const compiler::ImportOptions& opts);
// N is the size dim when a graph input uses it; otherwise the graph is static.
compiler::ImportOptions opts_for(const std::string& text);
// import_loose of `head` + `text` with opts_for(text), folding or not; fails the test on an error.
ir::Graph imp(const std::string& text, bool fold = true, const std::string& head = kOpset17Head);
// The shape of value `name` of `g` (a missing value fails the test).
const ir::Shape& shape_of(const ir::Graph& g, const std::string& name);
// The symbolic contents (ir::Value::ints) of value `name` as text, "(none)" without.
std::string ints_of(const ir::Graph& g, const std::string& name);
// import_loose of kOpset17Head + `text` fails with `code` and every needle in its message.
void expect_error(const std::string& text, const std::vector<std::string>& needles,
                  StatusCode code = StatusCode::kInvalidArgument);

// ---- graphs of one node ------------------------------------------------------------------------

// A graph input of a one-node graph; an empty name leaves an optional node input out.
struct NodeInput {
  std::string name;
  ir::Shape shape;
  DType dtype = DType::kF32;
};

// A graph of the node `node_name` (`domain`.`op` with `attrs`) over graph inputs `ins` and one
// output "y" of unknown shape, at ONNX opset `opset`; not inferred yet.
ir::Graph one_node_graph(const std::string& node_name, const std::string& domain,
                         const std::string& op, const std::vector<NodeInput>& ins,
                         std::map<std::string, ir::AttrValue> attrs, int64_t opset);

// Runs a one_node_graph (an error in `g` fails the test) at size `s`; its output "y".
compiler::RefTensor run_one_node(const Result<ir::Graph>& g, int64_t s,
                                 const std::map<std::string, compiler::RefTensor>& in);

// Calls the registered reference kernel of ONNX `op` directly on tensors (which it must check
// itself); "ok", its error message, or "not registered".
std::string ref_error(const std::string& op, const std::vector<const compiler::RefTensor*>& in,
                      std::map<std::string, ir::AttrValue> attrs = {});

}  // namespace kiln::testing
