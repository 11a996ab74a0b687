// KV-cache decoder exports (what torch.onnx and Optimum write with use_cache=True): each layer's
// keys and values arrive as a graph input ("past") and leave, with this call's new keys and
// values appended along the sequence axis, as a graph output ("present"). kiln recognises the
// pairs by structure — a rank-4 Concat along axis 2 that joins a graph input with a symbolic
// axis 2 (through Identity, Cast or a one-input Concat) with new rows, makes a graph output and
// also feeds the layer — whatever they are named. onnxruntime's com.microsoft.GroupQueryAttention
// appends inside: a rank-4 graph input as its past_key/past_value (either layout: the past of
// the current length, or with past_present_share_buffer the buffer of the maximum length of
// which seqlens_k says how much is valid) and its present_key/present_value a graph output.
// Until generation with a runtime-owned cache lands, such a model compiles as its prefill step.
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

// Rewrites a KV-cache export into its prefill step with an empty past: each Concat(past, new)
// keeps only the new rows (so each present output holds this call's keys or values), a Shape of
// a past becomes the past's shape with an empty sequence axis, the past inputs go, and the
// attention mask and presents take input_ids' batch and sequence dims. A GroupQueryAttention
// loses its past inputs (causal attention over the new tokens) and its seqlens_k and
// total_sequence_length become S - 1 and S, S input_ids' sequence length. Returns the pairs
// (none: the graph is unchanged). An error names a past read by anything else.
Result<std::vector<OnnxKvPair>> onnx_kv_to_prefill(onnx::GraphProto& g);

}  // namespace kiln::compiler
