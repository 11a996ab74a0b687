// Whole-graph checks that run before an ONNX graph is converted: opsets, supported ops (all
// listed at once), node names, and a topological order (or the node on a cycle).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cache/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::compiler {

bool onnx_is_default_domain(const std::string& domain);  // "" or "ai.onnx"
// "node 'n' (Op)", or "node 'n' (com.microsoft.Op)" for other domains.
std::string onnx_node_label(const std::string& name, const onnx::NodeProto& n);

// Imported opsets by domain ("" for the default); errors for an ir_version or opset outside
// what kiln reads (default domain 13 to 24, com.microsoft 1).
Result<std::map<std::string, int64_t>> onnx_check_opsets(const onnx::ModelProto& m);

// Node names as kiln uses them: empty or repeated names become "<op>_<index>".
std::vector<std::string> onnx_node_names(const onnx::GraphProto& g);

struct OnnxUnsupported {
  std::string node;  // kiln's node name (onnx_node_names)
  std::string op_type;
  std::string domain;     // "ai.onnx" for the default domain
  int64_t opset = -1;     // of that domain; -1 when the model does not import it
  bool subgraph = false;  // the node carries a subgraph (If/Loop/Scan bodies are not supported)
};
// Every node kiln cannot compile, in graph order.
std::vector<OnnxUnsupported> onnx_unsupported_ops(const onnx::GraphProto& g,
                                                  const std::vector<std::string>& names,
                                                  const std::map<std::string, int64_t>& opsets);

// One error listing every node kiln cannot compile, each with name, op type, domain and opset
// ("2 unsupported ops: 'n3' (NonZero, domain 'ai.onnx', opset 17), ...").
Status onnx_check_ops(const onnx::GraphProto& g, const std::vector<std::string>& names,
                      const std::map<std::string, int64_t>& opsets);

// Node indexes in a topological order (original order kept where possible). `defined` maps the
// names not produced by nodes (graph inputs, initializers) to a description for messages.
// Errors: a value produced twice, an input produced by nothing, a cycle (naming a node on it).
Result<std::vector<int>> onnx_topo_order(const onnx::GraphProto& gp,
                                         const std::vector<std::string>& names,
                                         const std::map<std::string, std::string>& defined);

}  // namespace kiln::compiler
