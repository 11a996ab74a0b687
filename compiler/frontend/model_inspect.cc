#include "compiler/frontend/model_inspect.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "compiler/frontend/onnx_import.h"
#include "compiler/frontend/onnx_model_parse.h"

namespace kiln::compiler {

namespace {

bool looks_like_length(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  for (const char* w : {"seq", "length", "token", "len"})
    if (name.find(w) != std::string::npos) return true;
  return false;
}

}  // namespace

CompileConfig inspect_default_config(const onnx::ModelProto& m) {
  std::vector<std::string> params;  // dim_params of the graph inputs, in order
  std::vector<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.push_back(t.name());
  for (const auto& vi : m.graph().input()) {
    if (std::find(inits.begin(), inits.end(), vi.name()) != inits.end()) continue;
    for (const auto& d : vi.type().tensor_type().shape().dim())
      if (d.has_dim_param() && !d.dim_param().empty() &&
          std::find(params.begin(), params.end(), d.dim_param()) == params.end())
        params.push_back(d.dim_param());
  }
  CompileConfig c;
  c.max_size = 64;
  for (const std::string& p : params)
    if (c.size_dim.empty() && looks_like_length(p)) c.size_dim = p;
  if (c.size_dim.empty() && !m.graph().input().empty()) {
    for (const auto& d : m.graph().input(0).type().tensor_type().shape().dim())
      if (d.has_dim_param() && !d.dim_param().empty()) c.size_dim = d.dim_param();
  }
  for (const std::string& p : params)
    if (p != c.size_dim) c.dims[p] = 1;
  return c;
}

Result<ModelInspection> model_inspect(const std::filesystem::path& model,
                                      const CompileConfig* config) {
  std::ifstream f(model, std::ios::binary);
  if (!f) return not_found(fmt::format("{}: cannot open the model", model.string()));
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Result<onnx::ModelProto> m = onnx_parse_model(bytes);
  if (!m.ok()) return m.status().with_context(model.string());

  ModelInspection r;
  r.model = model;
  r.config_given = config != nullptr;
  r.config = config ? *config : inspect_default_config(*m);
  for (const auto& n : m->graph().node()) {
    const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
    ++r.ops[onnx_domain ? n.op_type() : n.domain() + "." + n.op_type()];
  }
  Result<std::map<std::string, int64_t>> opsets = onnx_check_opsets(*m);
  if (!opsets.ok()) {
    r.error = opsets.status().message();
    return r;
  }
  r.opsets = *opsets;
  r.unsupported = onnx_unsupported_ops(m->graph(), onnx_node_names(m->graph()), r.opsets);
  if (!r.unsupported.empty()) {
    r.error = fmt::format("{} unsupported op(s); nothing was imported", r.unsupported.size());
    return r;
  }
  Result<FrontEnd> fe = front_end_run(model, r.config);
  if (!fe.ok()) {
    r.error = fe.status().message();
    return r;
  }
  r.front_end = std::move(fe).value();
  return r;
}

}  // namespace kiln::compiler
