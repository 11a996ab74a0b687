// KV-cache decoder exports (what torch.onnx and Optimum write with use_cache=True): each layer's
// keys and values arrive as a graph input ("past") and leave, with this call's new keys and
// values appended along the sequence axis, as a graph output ("present"). kiln recognises the
// pairs by structure — a rank-4 Concat along axis 2 that joins a graph input (through Identity,
// Cast or a one-input Concat) with new rows and makes a graph output — whatever they are named.
#pragma once

#include <string>
#include <vector>

#include "cache/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::compiler {

struct OnnxKvPair {
  std::string past;     // the graph input, e.g. past_key_values.0.key
  std::string present;  // the graph output, e.g. present.0.key
};

// Every past/present pair of the graph, in output order.
std::vector<OnnxKvPair> onnx_kv_pairs(const onnx::GraphProto& g);

// Ok for a graph without pairs; otherwise an error naming them, saying generation is not built
// yet and what to export instead.
Status onnx_check_no_kv_cache(const onnx::GraphProto& g);

}  // namespace kiln::compiler
