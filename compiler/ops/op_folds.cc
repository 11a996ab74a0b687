#include "compiler/ops/op_folds.h"

namespace kiln::compiler {
namespace {

constexpr std::string_view kImport = "frontend/onnx_import";
constexpr std::string_view kInfer = "ir/graph_infer";
constexpr std::string_view kLegalize = "passes/legalize_variants";

// Sorted by domain, then op. A legalized op keeps its node when kiln's ops cannot express the
// variant (legalize_variants.h says which); lowering then names the op and this entry.
constexpr OpFold kFolds[] = {
    {"", "Attention", kLegalize, "kiln.Attention (+ Reshape/Transpose of 3-D Q/K/V)"},
    {"", "Constant", kImport, "constant data (the node is never built)"},
    {"", "RotaryEmbedding", kLegalize, "kiln.Rotary"},
    {"", "Shape", kInfer, "a symbolic constant (its dims as functions of S)"},
    {"", "SimplifiedLayerNormalization", kLegalize, "RMSNormalization"},
    {"", "Size", kInfer, "a symbolic constant (the element count, linear in S)"},
    {"com.microsoft", "Attention", kLegalize, "MatMul + Add + kiln.Attention"},
    {"com.microsoft", "BiasGelu", kLegalize, "Add + Gelu"},
    {"com.microsoft", "FastGelu", kLegalize, "Add + Gelu (approximate = tanh)"},
    {"com.microsoft", "GroupQueryAttention", kLegalize, "kiln.Attention (+ kiln.Rotary)"},
    {"com.microsoft", "MultiHeadAttention", kLegalize, "kiln.Attention"},
    {"com.microsoft", "RotaryEmbedding", kLegalize, "kiln.Rotary"},
    {"com.microsoft", "SimplifiedLayerNormalization", kLegalize, "RMSNormalization"},
    {"com.microsoft", "SkipLayerNormalization", kLegalize, "Add + LayerNormalization"},
    {"com.microsoft", "SkipSimplifiedLayerNormalization", kLegalize, "Add + RMSNormalization"},
};

}  // namespace

std::span<const OpFold> op_folds() { return kFolds; }

const OpFold* op_fold_find(std::string_view domain, std::string_view op) {
  if (domain == "ai.onnx") domain = "";
  for (const OpFold& f : kFolds)
    if (f.domain == domain && f.op == op) return &f;
  return nullptr;
}

}  // namespace kiln::compiler
