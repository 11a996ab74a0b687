// `kiln inspect MODEL.onnx`: what the front end makes of a model — its op histogram, every
// unsupported node, the attention ops after fusion and the piece plan — without compiling.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/status.h"
#include "compiler/config.h"
#include "compiler/frontend/front_end.h"
#include "compiler/frontend/onnx_graph_checks.h"

namespace kiln::compiler {

struct ModelInspection {
  std::filesystem::path model;
  CompileConfig config;  // given, or chosen by inspect_default_config
  bool config_given = false;
  std::map<std::string, int64_t> opsets;  // domain ("" = ONNX) -> version
  std::map<std::string, int> ops;         // op -> count in the file; "domain.Op" for others
  std::vector<OnnxUnsupported> unsupported;
  std::optional<FrontEnd> front_end;  // set when import and passes succeeded
  std::string error;                  // why front_end is empty (import or pass error)
  int attention_ops() const { return front_end ? front_end_attention_count(front_end->graph) : 0; }
};

// Errors only when the file cannot be read or parsed; unsupported ops and import failures are
// reported inside the result. `config` null: inspect_default_config.
Result<ModelInspection> model_inspect(const std::filesystem::path& model,
                                      const CompileConfig* config);

// Without a config: the size dim is the input dim_param that looks like a sequence length
// ("seq", "sequence", "length", "token" in its name), else the last dim_param of the first input;
// every other dim_param is bound to 1; max_size 64.
CompileConfig inspect_default_config(const onnx::ModelProto& m);

}  // namespace kiln::compiler
