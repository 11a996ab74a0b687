// ONNX import: a ModelProto file (validated) → ir::Graph with every dim bound either to a
// constant (config `dims`) or to a linear expression of the size S (config `size_dim`).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "cache/status.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

struct ImportOptions {
  ImportOptions() = default;
  ImportOptions(std::string size_dim_, std::map<std::string, int64_t> dims_)
      : size_dim(std::move(size_dim_)), dims(std::move(dims_)) {}

  std::string size_dim;                 // dim_param that becomes S; empty: a static graph
  std::map<std::string, int64_t> dims;  // other dim_params bound to constants
  int64_t max_size = 0;                 // S ranges over [1, max_size]; 0: 65536
  // Binds every dim_param that is neither size_dim nor in `dims` (used by `kiln inspect`
  // without a config); nullopt: such a dim_param is an error.
  std::optional<int64_t> unbound_dim;
  bool fold = true;  // fold constants and shape subgraphs while inferring (graph_infer.h)
  // The config has `kv_cache:`: a KV-cache export is compiled for generation (no warning that
  // only its prefill step is compiled).
  bool generation = false;
  // At most this many bytes of external data in all (every copy counted: initializers naming
  // the same region with the same type and shape are one constant, read once; another shape is
  // another copy); 0: the total size of the distinct external data files.
  uint64_t max_external_bytes = 0;
};

// Reads and validates the file (a regular file, opened without blocking on a FIFO; size limits,
// structure, opset, supported ops — all unsupported ops are listed at once with node names), then
// builds the IR and infers shapes.
Result<ir::Graph> onnx_import_file(const std::filesystem::path& model, const ImportOptions& opts);

// Same, from bytes already in memory. `source` names the model in messages; `base_dir` is where
// external data would be resolved from.
Result<ir::Graph> onnx_import_bytes(std::string_view bytes, std::string_view source,
                                    const std::filesystem::path& base_dir,
                                    const ImportOptions& opts);

}  // namespace kiln::compiler
