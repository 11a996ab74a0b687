// Helpers for op and pass tests: models from ONNX's textual syntax, random inputs for any
// graph, and the before/after equivalence check every pass test uses.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/frontend/onnx_import.h"
#include "compiler/ir/ir.h"
#include "compiler/reference/reference_interpreter.h"

namespace kiln::testing {

// Parses a model in ONNX's textual syntax (onnx/defs/parser.h), e.g.
//   <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
//   g (float[N, 8] x) => (float[N, 8] y) { y = Relu(x) }
// and imports it. Errors (parse or import) come back as a Status.
Result<ir::Graph> import_text(std::string_view text, const compiler::ImportOptions& opts);
// The same, failing the current test on an error.
ir::Graph import_text_ok(std::string_view text, const compiler::ImportOptions& opts);
// Serialised ModelProto bytes of the text (for tests that feed the importer bytes).
Result<std::string> model_bytes_from_text(std::string_view text);

// Random inputs for every graph input at size `s`: floats uniform in [-2, 2), integers in
// [0, int_hi) (segment ids, inputs named *type_ids, in [0, 2)), bools 0/1. Seeded, so a test
// is repeatable.
std::map<std::string, compiler::RefTensor> random_inputs(const ir::Graph& g, int64_t s,
                                                         uint32_t seed, int64_t int_hi = 4);

// Runs both graphs on the same fresh random inputs at each size and compares every output
// of `before` by name: |a - b| <= atol + rtol·|b|, NaN/Inf in the same places, integers exact.
::testing::AssertionResult graphs_equivalent(const ir::Graph& before, const ir::Graph& after,
                                             std::initializer_list<int64_t> sizes,
                                             double rtol = 1e-9, double atol = 1e-9,
                                             uint32_t seed = 11, int64_t int_hi = 4);

// Compares two tensors (dims, then values as above); `what` names them in the message.
::testing::AssertionResult tensors_close(const compiler::RefTensor& got,
                                         const compiler::RefTensor& want, double rtol, double atol,
                                         const std::string& what);

// Reads an ONNX TensorProto file (backend-test layout: input_0.pb, output_0.pb) of any dtype
// into a RefTensor; `name` (optional) receives the tensor's name.
Result<compiler::RefTensor> ref_read_pb(const std::filesystem::path& path,
                                        std::string* name = nullptr);

// input_0.pb, input_1.pb, ... of a test data set directory (as many as there are), by tensor name.
Result<std::map<std::string, compiler::RefTensor>> ref_read_pb_inputs(
    const std::filesystem::path& data_dir);

// The single-op models (tests/models/ops) and the exported whole models (tests/models/exported).
std::filesystem::path op_models_dir();
std::filesystem::path exported_models_dir();
// The names of the folders under `root` that hold a model.onnx, sorted.
std::vector<std::string> model_names(const std::filesystem::path& root);
// The import options an exported model's kiln.yaml gives (size dim, bound dims, max size).
Result<compiler::ImportOptions> exported_import_options(const std::filesystem::path& dir);

// Number of nodes with this op (and domain: "" for ONNX).
int count_ops(const ir::Graph& g, std::string_view op, std::string_view domain = "");

}  // namespace kiln::testing
