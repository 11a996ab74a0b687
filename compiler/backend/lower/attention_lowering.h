// Pieces the attention lowering rules share (lower_attention.cc: kiln.Attention;
// lower_paged_attention.cc: kiln.PagedAttention): the strided view chains around an attention
// node (attention_views.cc) and the launch of an attention kernel.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/backend/launch_plan.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/backend/lower/lower_rules.h"

namespace kiln::compiler {

using ViewStrides = std::vector<ir::DimExpr>;

// An input's chain of view nodes back to the buffer the kernel reads (`base`), as the element
// offset and strides of the attention input [B, H, S, D] inside it.
struct InChain {
  std::vector<int> nodes;  // from the attention input back towards the base
  int base = -1;
  ir::DimExpr offset;
  ViewStrides st;
};

// The output's chain forward to the buffer the kernel writes (`final_value`).
struct OutChain {
  std::vector<int> nodes;  // from the attention output forward
  int final_value = -1;
  ViewStrides st;  // of the attention output [B, Hq, Sq, Dv] inside final_value's buffer
};

struct AttnChains {
  InChain in[3];
  OutChain out;
};

struct ViewChains {
  std::map<int, AttnChains> attention;  // by kiln.Attention / kiln.PagedAttention node
  std::map<int, InChain> rotary;        // X's chain, by kiln.Rotary node (last axis stride 1)
};

bool dim_is_one(const ir::DimExpr& d);
// Row-major strides of `shape`; nullopt when a product overflows the dim algebra.
std::optional<ViewStrides> contiguous_view_strides(const ir::Shape& shape);
// Chains of every kiln.Attention and kiln.PagedAttention node and of every kiln.Rotary's X.
ViewChains view_chains(const LowerContext& cx);
// view_chains(cx).attention.
std::map<int, AttnChains> attn_chains(const LowerContext& cx);
// The attention node's name, then those of the view nodes it absorbs.
std::string absorbed_names(const LowerContext& cx, const ir::Node& n, const AttnChains& c);

// An attention kernel's launch: `k`'s kernel and geometry with `args` (the run-time size
// appended), `nodes` naming the IR nodes; `config` and `candidates`: the launch's tuning
// alternatives.
KernelLaunch attention_launch(LowerContext& cx, AttnKernel k, std::vector<KernelArgRef> args,
                              const std::string& nodes, std::string config = {},
                              std::vector<LaunchCandidate> candidates = {});

// kiln.PagedAttention (lower_paged_attention.cc).
Status lower_paged_attention(LowerContext& cx, int i);

}  // namespace kiln::compiler
