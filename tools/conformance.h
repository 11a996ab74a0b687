// Conformance over folders in ONNX's backend-test layout (model.onnx, test_data_set_N/input_i.pb
// and output_j.pb, optionally a kiln.yaml): the data sets, the dims each one binds, one compile
// config per distinct binding, and the comparison of outputs with the stored ones. `kiln
// conformance` (tools/cmd_conformance.cc) and the corpus tests use it; conformance_run.h runs it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache/status.h"
#include "compiler/config.h"
#include "compiler/reference/reference_compare.h"
#include "compiler/reference/reference_interpreter.h"
#include "kiln/graph_mode.h"
#include "kiln/tensor.h"

namespace kiln::tools {

// A graph input that is not an initializer: its name and, per axis, the dim_param naming it
// ("" where the axis has a fixed dim_value).
struct ConformanceInput {
  std::string name;
  std::vector<std::string> dim_params;
};

struct ConformanceDataSet {
  std::string name;                          // "test_data_set_0"
  std::vector<Tensor> inputs;                // graph-input order, named as the model names them
  std::vector<compiler::RefTensor> outputs;  // graph-output order
};

struct ConformanceFolder {
  std::filesystem::path dir;
  std::string name;                             // the folder's own name
  std::vector<ConformanceInput> inputs;         // graph inputs less initializers
  std::vector<std::string> outputs;             // graph output names
  std::optional<compiler::CompileConfig> base;  // the folder's kiln.yaml, when it has one
  std::vector<ConformanceDataSet> sets;         // test_data_set_0, 1, ... in numeric order
};

// Reads model.onnx's inputs and outputs, kiln.yaml when present, and every data set (input i is
// graph input i, output j graph output j, as ONNX's backend runner pairs them).
Result<ConformanceFolder> conformance_folder_read(const std::filesystem::path& dir);

// Data sets that bind the model's dim_params alike: one compile serves them all.
struct ConformanceBinding {
  std::string size_dim;                 // the run-time size; "" compiles a static model
  std::map<std::string, int64_t> dims;  // every other dim_param, read off the sets' inputs
  std::vector<size_t> sets;             // indices into ConformanceFolder::sets
  std::vector<int64_t> sizes;           // each of those sets' S (1 for a static model)
  int64_t max_s() const;
};

// Groups the data sets by their bindings. `size_dim` must be a dim_param of some input, or ""
// (then every dim_param is bound and the model compiles static: S is 1).
Result<std::vector<ConformanceBinding>> conformance_bindings(const ConformanceFolder& f,
                                                             const std::string& size_dim);

// The size dim a run uses: `requested` when given, else kiln.yaml's, else "" (static).
std::string conformance_size_dim(const ConformanceFolder& f, const std::string& requested);

struct ConformanceOptions {
  std::optional<compiler::Precision> precision;  // empty: kiln.yaml's (default fp32)
  std::string size_dim;               // empty: the folder's kiln.yaml decides, else static
  std::optional<CudaGraphMode> mode;  // empty: kiln.yaml's (default FULL)
  bool autotune = false;              // numerics by default: the heuristics' choices
  bool compile_only = false;          // compile every binding, run nothing (no GPU needed)
  std::optional<int> level;           // compilation.level; empty: kiln.yaml's (default 3)
};

// One binding's compile config: kiln.yaml (or the defaults) with the binding's size_dim and
// dims, max_size raised to the largest S, and the options' precision, mode and autotuning. A
// static model compiles at max_size 1 with capture size 1.
compiler::CompileConfig conformance_config(const ConformanceFolder& f, const ConformanceBinding& b,
                                           const ConformanceOptions& opts);

// One output against its stored value: floats within `tol`, NaN/Inf in the same positions,
// integers and bools exactly, shapes equal.
struct OutputCheck {
  std::string output;
  bool ok = true;
  std::string problem;       // shape or dtype disagreement; empty when the values were compared
  int64_t count = 0;         // elements compared
  int64_t mismatches = 0;    // outside tolerance
  double max_error = 0;      // largest |got - want| over finite pairs
  int64_t index = -1;        // where: the element furthest outside its tolerance (a misplaced
                             // NaN/Inf: the first mismatch); -1 when all match
  double got = 0, want = 0;  // the values at `index`
  // "'y'[17]: got 0.5, stored 0.25; max|err| 0.25, 4 of 96 outside tolerance"
  std::string summary() const;
};
OutputCheck conformance_compare(const std::string& output, const compiler::RefTensor& got,
                                const compiler::RefTensor& want, compiler::Tolerance tol);

// --exclude FILE: one `name  reason` per line (name may be a glob: test_sequence_*; blank lines
// and lines starting with '#' are skipped). Every entry needs a reason.
using Exclusions = std::vector<std::pair<std::string, std::string>>;
Result<Exclusions> conformance_exclusions_read(const std::filesystem::path& path);
// The reason `name` is excluded, or nullopt.
std::optional<std::string> conformance_excluded(const Exclusions& ex, const std::string& name);

// The first line of an error message (the rest is detail a table row has no room for).
std::string first_line(const std::string& text);

}  // namespace kiln::tools
