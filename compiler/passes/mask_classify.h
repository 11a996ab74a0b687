// Classifies the mask of a decomposed attention by evaluating its subgraph with the CPU
// reference at a few sizes: no mask, causal, key padding from one [B, Skv] input (an
// attention_mask, possibly with causal), or a general mask that must stay an input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/ir.h"

namespace kiln::compiler {

// One masking step between the scores and the Softmax.
struct MaskTerm {
  int value = -1;              // Add form: the additive mask; Where form: the condition
  bool condition = false;      // Where form
  bool keep_when_true = true;  // Where(c, scores, fill): true; Where(c, fill, scores): false
};

// Where the scores [B, H, Sq, Skv] are masked before Softmax: one or more steps, each applied to
// the result of the one before (transformers 4.x GPT-2: Add(Where(causal, scores, min), padding)).
// A score is masked when any step masks it.
struct MaskSite {
  std::vector<MaskTerm> terms;
  ir::Shape scores;  // the masked scores' shape (rank 4)
};

struct MaskClass {
  bool causal = false;   // query i sees key j only when j <= i + (Skv - Sq)
  int key_padding = -1;  // graph input M [B, Skv]: key j is masked where M[b, j] == 0
  bool general = false;  // none of the above: the mask stays an input of the fused op
  std::string reason;    // general: why it is none of the kinds, for `kiln inspect`
};

// Additive values at or below this count as "masked" (exp underflows to 0 in float64 after
// the softmax's max subtraction); exactly 0 counts as "kept"; anything else is general.
inline constexpr double kMaskedBelow = -1e4;

// Never fails: a mask it cannot evaluate or recognise is general (kept as it is).
MaskClass mask_classify(const ir::Graph& g, const MaskSite& site, int64_t max_size);

}  // namespace kiln::compiler
