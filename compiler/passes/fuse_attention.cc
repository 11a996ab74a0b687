#include "compiler/passes/fuse_attention.h"

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compiler/ops/op_util.h"
#include "compiler/passes/fuse_driver.h"
#include "compiler/passes/graph_edit.h"
#include "compiler/passes/mask_classify.h"
#include "compiler/passes/pattern_match.h"

namespace kiln::compiler {

namespace {

const std::vector<int64_t> kSwapLast2 = {0, 1, 3, 2};

// One decomposed attention found by the matcher, applied after every match is collected (the
// view's node indexes stay valid until then).
struct AttentionPlan {
  int out = -1;  // the P·V MatMul's output, produced by the fused node
  int q = -1, k = -1, v = -1;
  int k_src = -1;  // when k == -1: K = Transpose(k_src, k_perm), inserted
  std::vector<int64_t> k_perm;
  double scale = 1.0;
  MaskSite site;
  MaskClass mask;
  bool has_mask = false;
  std::vector<double> fills;  // per mask term: the Where form's fill value (0 for Add terms)
  std::vector<DType> fill_dtypes;
  std::string name;
};

bool is_float(const PatternView& pv, int v) { return dtype_is_float(pv.value(v).dtype); }

// v with every Cast between float dtypes stripped (the reference computes in float64, and
// kiln.Attention accumulates in higher precision than any such Cast).
int skip_float_casts(const PatternView& pv, int v) {
  for (const ir::Node* c = pv.producer(v, "Cast"); c && c->inputs.size() == 1 && c->inputs[0] >= 0;
       c = pv.producer(v, "Cast")) {
    if (!is_float(pv, v) || !is_float(pv, c->inputs[0])) break;
    v = c->inputs[0];
  }
  return v;
}

// Strips no-op Casts and Mul/Div by a constant scalar that keeps the shape, multiplying the
// factors into `scale`.
int peel_scale(const PatternView& pv, int v, double& scale) {
  for (;;) {
    v = pv.skip_noop_casts(v);
    const ir::Node* n = pv.producer(v);
    if (!n || !n->domain.empty() || n->inputs.size() != 2 || (n->op != "Mul" && n->op != "Div"))
      return v;
    const int a = n->inputs[0], b = n->inputs[1];
    auto scalar = [&](int c) -> std::optional<double> {
      const ir::Value& cv = pv.value(c);
      if (!cv.constant ||
          std::optional<ir::DimExpr>(ir::DimExpr::constant(1)) != ir::shape_numel(cv.shape))
        return std::nullopt;
      std::optional<RefTensor> t = pv.constant(c);
      if (!t || t->data.size() != 1 || !std::isfinite(t->data[0]) || t->data[0] == 0.0)
        return std::nullopt;
      return t->data[0];
    };
    int data = -1;
    double f = 1.0;
    if (auto c = scalar(b)) {
      data = a;
      f = n->op == "Mul" ? *c : 1.0 / *c;
    } else if (auto c2 = scalar(a); c2 && n->op == "Mul") {
      data = b;
      f = *c2;
    }
    if (data < 0 || pv.value(data).shape != pv.value(v).shape ||
        pv.value(data).dtype != pv.value(v).dtype)
      return v;
    scale *= f;
    v = data;
  }
}

// The scores MatMul's output behind casts and scales, or -1.
int scores_matmul(const PatternView& pv, int v, double& scale) {
  double s = 1.0;
  const int m = peel_scale(pv, skip_float_casts(pv, v), s);
  const ir::Node* mm = pv.producer(m, "MatMul");
  if (!mm || pv.value(m).shape.size() != 4) return -1;
  scale *= s;
  return m;
}

// An existing Transpose(src, perm) computed before node `before`, or -1.
int find_transpose(const PatternView& pv, int src, const std::vector<int64_t>& perm, int before) {
  for (int u : pv.users(src)) {
    const ir::Node& n = pv.graph().nodes[u];
    if (u < before && n.domain.empty() && n.op == "Transpose" && n.attr_ints("perm") == perm)
      return n.outputs[0];
  }
  return -1;
}

// Fills K in `p` from K' = the scores MatMul's second input: K = K' with its last two axes
// swapped, reusing an existing value or planning a Transpose.
bool plan_key(const PatternView& pv, int kt, int anchor, AttentionPlan& p) {
  kt = peel_scale(pv, kt, p.scale);
  if (pv.value(kt).shape.size() != 4) return false;
  int src = kt;
  std::vector<int64_t> perm = kSwapLast2;
  if (const ir::Node* t = pv.producer(kt, "Transpose")) {
    const std::vector<int64_t> tp = t->attr_ints("perm");
    if (tp.size() == 4) {
      src = t->inputs[0];
      for (size_t i = 0; i < 4; ++i) perm[i] = tp[static_cast<size_t>(kSwapLast2[i])];
    }
  }
  if (perm == std::vector<int64_t>{0, 1, 2, 3}) {
    p.k = peel_scale(pv, src, p.scale);
    return true;
  }
  p.k = find_transpose(pv, src, perm, anchor);
  if (p.k < 0) {
    p.k_src = src;
    p.k_perm = perm;
  }
  return true;
}

// The most masking steps (Add or Where) kiln looks through between the scores and the Softmax.
constexpr int kMaxMaskSteps = 4;

int plan_scores(const PatternView& pv, int sm_in, AttentionPlan& p, int depth = 0);

// Plans the scores below one mask step (`term`, with its Where fill): on success records the
// step after the deeper ones and returns the MatMul output; otherwise leaves `p`'s steps as they
// were and returns -1.
int plan_below_step(const PatternView& pv, int scores, const MaskTerm& term, double fill,
                    DType fill_dtype, AttentionPlan& p, int depth) {
  const size_t terms = p.site.terms.size();
  const int mm = plan_scores(pv, scores, p, depth + 1);
  if (mm < 0) {
    p.site.terms.resize(terms);
    p.fills.resize(terms);
    p.fill_dtypes.resize(terms);
    return -1;
  }
  p.site.terms.push_back(term);
  p.fills.push_back(fill);
  p.fill_dtypes.push_back(fill_dtype);
  return mm;
}

// Finds the masking steps between the scores MatMul and Softmax input `v`, innermost first:
// returns the MatMul output (or -1) and fills the plan's scale and mask terms. Each step is
// Add(scores, mask) or Where(condition, scores, fill <= -1e4) (either branch), applied to the
// result of the step before; a scale may sit only below every step (it would scale the mask).
int plan_scores(const PatternView& pv, int sm_in, AttentionPlan& p, int depth) {
  const int v = skip_float_casts(pv, sm_in);
  const ir::Node* n = pv.producer(v);
  const ir::Shape& shape = pv.value(v).shape;
  if (depth < kMaxMaskSteps && n && n->domain.empty() && n->op == "Add" &&
      n->inputs.size() == 2) {
    for (int side = 0; side < 2; ++side) {
      const int scores = n->inputs[side], mask = n->inputs[1 - side];
      if (pv.value(scores).shape != shape) continue;
      const MaskTerm term{.value = mask, .condition = false, .keep_when_true = true};
      const int mm = plan_below_step(pv, scores, term, 0.0, pv.value(mask).dtype, p, depth);
      if (mm >= 0) return mm;
    }
  }
  if (depth < kMaxMaskSteps && n && n->domain.empty() && n->op == "Where" &&
      n->inputs.size() == 3 && pv.value(n->inputs[0]).dtype == DType::kBool) {
    for (int side = 1; side <= 2; ++side) {
      const int scores = n->inputs[side], fill = n->inputs[3 - side];
      std::optional<double> f = pv.splat(fill);
      if (!f || !(*f <= kMaskedBelow) || pv.value(scores).shape != shape) continue;
      const MaskTerm term{.value = n->inputs[0], .condition = true, .keep_when_true = side == 1};
      const int mm = plan_below_step(pv, scores, term, *f, pv.value(fill).dtype, p, depth);
      if (mm >= 0) return mm;
    }
  }
  double scale = 1.0;
  const int mm = scores_matmul(pv, v, scale);
  if (mm < 0) return -1;
  p.scale = scale;
  p.has_mask = depth > 0;
  p.site.scores = shape;
  return mm;
}

// Where(IsNaN(p), 0, p): the output of `w` when it is that guard around p, else -1. Exporters of
// SDPA put it after the Softmax so that fully masked rows (NaN) become zeros, which is what
// kiln.Attention yields for them.
int nan_guard_output(const PatternView& pv, const ir::Node& w, int p) {
  if (!w.domain.empty() || w.op != "Where" || w.inputs.size() != 3 || w.inputs[2] != p)
    return -1;
  const ir::Node* isnan = pv.producer(w.inputs[0], "IsNaN");
  if (!isnan || isnan->inputs.size() != 1 || isnan->inputs[0] != p) return -1;
  const std::optional<double> zero = pv.splat(w.inputs[1]);
  if (!zero || *zero != 0.0 || pv.value(w.outputs[0]).shape != pv.value(p).shape) return -1;
  return w.outputs[0];
}

// The P·V MatMuls reading the Softmax output `p` as their first input (through float Casts and
// the NaN guard).
void find_pv_matmuls(const PatternView& pv, int p, std::vector<const ir::Node*>& out) {
  for (int u : pv.users(p)) {
    const ir::Node& n = pv.graph().nodes[u];
    if (!n.domain.empty()) continue;
    if (n.op == "MatMul" && n.inputs.size() == 2 && n.inputs[0] == p) out.push_back(&n);
    if (n.op == "Cast" && is_float(pv, p) && is_float(pv, n.outputs[0]))
      find_pv_matmuls(pv, n.outputs[0], out);
    if (const int guarded = nan_guard_output(pv, n, p); guarded >= 0)
      find_pv_matmuls(pv, guarded, out);
  }
}

bool softmax_last_axis(const PatternView& pv, const ir::Node& sm) {
  if (sm.inputs.size() != 1 || sm.outputs.size() != 1) return false;
  const auto rank = static_cast<int64_t>(pv.value(sm.inputs[0]).shape.size());
  const int64_t axis = sm.attr_int("axis", pv.opset(sm) >= 13 ? -1 : 1);
  return rank == 4 && (axis == -1 || axis == rank - 1);
}

// Checks the heads and lengths line up: Q [B,Hq,Sq,D], K [B,Hkv,Skv,D], V [B,Hkv,Skv,Dv].
bool shapes_fit(const PatternView& pv, const AttentionPlan& p) {
  const ir::Shape& q = pv.value(p.q).shape;
  const ir::Shape& v = pv.value(p.v).shape;
  ir::Shape k;
  if (p.k >= 0) {
    k = pv.value(p.k).shape;
  } else {
    const ir::Shape& s = pv.value(p.k_src).shape;
    for (int64_t a : p.k_perm) k.push_back(s[static_cast<size_t>(a)]);
  }
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return false;
  if (q[0] != k[0] || q[0] != v[0] || k[1] != v[1] || q[3] != k[3] || k[2] != v[2]) return false;
  if (!q[1].is_constant() || !k[1].is_constant() || k[1].offset < 1) return false;
  return q[1].offset % k[1].offset == 0;
}

std::optional<AttentionPlan> plan_attention(const PatternView& pv, const ir::Node& sm,
                                            const ir::Node& pv_mm, int anchor, std::string& why) {
  AttentionPlan p;
  const int mm_out = plan_scores(pv, sm.inputs[0], p);
  if (mm_out < 0) {
    why = "its input is not a rank-4 MatMul Q·Kᵀ behind scales, float Casts and up to four mask "
          "steps (Add, or Where(condition, scores, fill <= -1e4))";
    return std::nullopt;
  }
  const ir::Node& mm = *pv.producer(mm_out);
  // The scores MatMul must not broadcast: Q' [B,H,Sq,D] · K' [B,H,D,Skv].
  const ir::Shape& qs = pv.value(mm.inputs[0]).shape;
  const ir::Shape& ks = pv.value(mm.inputs[1]).shape;
  const ir::Shape& vs = pv.value(pv_mm.inputs[1]).shape;
  if (qs.size() != 4 || ks.size() != 4 || vs.size() != 4 || qs[0] != ks[0] || qs[1] != ks[1] ||
      vs[0] != qs[0] || vs[1] != qs[1]) {
    why = fmt::format("the scores MatMul '{}' reads Q {} and Kᵀ {} and the values are {}: not "
                      "[B, H, Sq, D] · [B, H, D, Skv] with V [B, H, Skv, Dv]",
                      mm.name, ir::shape_to_string(qs), ir::shape_to_string(ks),
                      ir::shape_to_string(vs));
    return std::nullopt;
  }
  p.q = peel_scale(pv, mm.inputs[0], p.scale);
  if (!plan_key(pv, mm.inputs[1], anchor, p)) {
    why = "the key operand is not rank 4 behind its scale";
    return std::nullopt;
  }
  p.v = pv_mm.inputs[1];
  // GQA: read the kv heads before repetition when K and V are repeated alike.
  int64_t nk = 0, nv = 0;
  const int k0 = p.k >= 0 ? unrepeat_kv(pv, p.k, nk) : -1;
  const int v0 = unrepeat_kv(pv, p.v, nv);
  if (k0 >= 0 && v0 >= 0 && nk == nv) {
    p.k = k0;
    p.v = v0;
  }
  if (!shapes_fit(pv, p)) {
    why = "Q, K and V do not line up as [B, Hq, Sq, D], [B, Hkv, Skv, D], [B, Hkv, Skv, Dv] with "
          "constant heads, Hq a multiple of Hkv";
    return std::nullopt;
  }
  p.out = pv_mm.outputs[0];
  p.name = pv.graph().nodes[static_cast<size_t>(anchor)].name;
  return p;
}

void note(const FuseOptions& opts, const std::string& node, std::string reason) {
  if (opts.notes) opts.notes->push_back({node, std::move(reason)});
}

// Each mask site classified once: its terms and scores shape → class.
using MaskClasses = std::map<std::string, MaskClass>;

std::string site_key(const MaskSite& site) {
  std::string key = ir::shape_to_string(site.scores);
  for (const MaskTerm& t : site.terms)
    key += fmt::format(" {}:{}{}", t.value, t.condition ? 1 : 0, t.keep_when_true ? 1 : 0);
  return key;
}

// Adds a plan for each P·V MatMul reading `sm` when sm is a last-axis Softmax.
void match_attention(const PatternView& pv, const ir::Node& sm, const FuseOptions& opts,
                     MaskClasses& masks, std::vector<AttentionPlan>& plans) {
  if (!sm.domain.empty() || sm.op != "Softmax" || !softmax_last_axis(pv, sm)) return;
  std::vector<const ir::Node*> pv_mms;
  find_pv_matmuls(pv, sm.outputs[0], pv_mms);
  if (pv_mms.empty())
    note(opts, sm.name,
         "no attention: the Softmax output is not the first input of a MatMul (P·V), directly "
         "or through float Casts and Where(IsNaN(P), 0, P)");
  for (const ir::Node* pv_mm : pv_mms) {
    const int anchor = pv.producer_index(pv_mm->outputs[0]);
    std::string why;
    std::optional<AttentionPlan> p = plan_attention(pv, sm, *pv_mm, anchor, why);
    if (!p) {
      note(opts, sm.name, "no attention: " + why);
      continue;
    }
    if (p->has_mask) {
      const std::string key = site_key(p->site);
      auto it = masks.find(key);
      if (it == masks.end())
        it = masks.emplace(key, mask_classify(pv.graph(), p->site, opts.max_size)).first;
      p->mask = it->second;
      if (p->mask.general)
        note(opts, p->name,
             fmt::format("attention formed, but its mask '{}' stays a materialised input: {}",
                         pv.value(p->site.terms.back().value).name, p->mask.reason));
    }
    plans.push_back(std::move(*p));
  }
}

// Numpy broadcasting of two shapes whose dims are equal or one side the constant 1 (what the
// mask terms' Add/Where nodes already checked).
ir::Shape broadcast_shape(const ir::Shape& a, const ir::Shape& b) {
  ir::Shape out(std::max(a.size(), b.size()), ir::DimExpr::constant(1));
  for (size_t i = 0; i < out.size(); ++i) {
    const size_t ia = i + a.size(), ib = i + b.size();
    const ir::DimExpr* da = ia >= out.size() ? &a[ia - out.size()] : nullptr;
    const ir::DimExpr* db = ib >= out.size() ? &b[ib - out.size()] : nullptr;
    if (da && !(da->is_constant() && da->offset == 1)) out[i] = *da;
    if (db && !(db->is_constant() && db->offset == 1)) out[i] = *db;
  }
  return out;
}

// The plan's mask terms as one additive mask, planning the nodes that build it into `before`:
// an Add term as it is, Where(c, scores, fill) as Where(c, 0, fill) (equal outside fully masked
// rows), the terms summed.
int additive_mask(ir::Graph& g, const AttentionPlan& p, std::vector<ir::Node>& before) {
  int sum = -1;
  for (size_t k = 0; k < p.site.terms.size(); ++k) {
    const MaskTerm& t = p.site.terms[k];
    int term = t.value;
    if (t.condition) {
      const DType dt = p.fill_dtypes[k];
      const int zero = graph_new_constant(g, p.name + "/mask_zero", dt, {}, {0.0});
      const int fill = graph_new_constant(g, p.name + "/mask_fill", dt, {}, {p.fills[k]});
      term = graph_new_value(g, p.name + "/mask", dt, g.values[t.value].shape);
      before.push_back({.name = graph_unique_node_name(g, p.name + "/mask_where"),
                        .op = "Where",
                        .domain = "",
                        .inputs = t.keep_when_true ? std::vector<int>{t.value, zero, fill}
                                                   : std::vector<int>{t.value, fill, zero},
                        .outputs = {term},
                        .attrs = {}});
    }
    if (sum < 0) {
      sum = term;
      continue;
    }
    const int total = graph_new_value(g, p.name + "/mask_sum", g.values[sum].dtype,
                                      broadcast_shape(g.values[sum].shape, g.values[term].shape));
    before.push_back({.name = graph_unique_node_name(g, p.name + "/mask_add"),
                      .op = "Add",
                      .domain = "",
                      .inputs = {sum, term},
                      .outputs = {total},
                      .attrs = {}});
    sum = total;
  }
  return sum;
}

// Applies one plan: inserts the helper nodes (K transpose, additive mask) and replaces the P·V
// MatMul by kiln.Attention. Leaves the nodes unchanged when inference disagrees (run_fusion
// then drops the values made here).
bool apply_attention_plan(ir::Graph& g, AttentionPlan p, const FuseOptions& opts) {
  const int pos = fused_node_index(g, p.out);
  if (pos < 0) return false;
  std::vector<ir::Node> before;
  if (p.k < 0) {
    ir::Shape ks;
    for (int64_t a : p.k_perm) ks.push_back(g.values[p.k_src].shape[static_cast<size_t>(a)]);
    p.k = graph_new_value(g, p.name + "/key", g.values[p.k_src].dtype, ks);
    before.push_back({.name = graph_unique_node_name(g, p.name + "/key_transpose"),
                      .op = "Transpose",
                      .domain = "",
                      .inputs = {p.k_src},
                      .outputs = {p.k},
                      .attrs = {{"perm", p.k_perm}}});
  }
  const int mask = p.mask.general ? additive_mask(g, p, before) : -1;
  std::vector<int> inputs = {p.q, p.k, p.v, mask, p.mask.key_padding};
  while (inputs.back() < 0) inputs.pop_back();
  ir::Node fused{.name = p.name,
                 .op = "Attention",
                 .domain = "kiln",
                 .inputs = inputs,
                 .outputs = {p.out},
                 .attrs = {{"scale", p.scale}, {"causal", int64_t{p.mask.causal ? 1 : 0}}}};
  bool agrees = true;
  for (const ir::Node& n : before) agrees = agrees && infer_agrees(g, n, opts.max_size);
  if (!agrees || !infer_agrees(g, fused, opts.max_size)) return false;
  for (size_t i = 0; i < before.size(); ++i)
    graph_insert_node(g, static_cast<size_t>(pos) + i, std::move(before[i]));
  graph_replace_node(g, static_cast<size_t>(pos) + before.size(), std::move(fused));
  return true;
}

}  // namespace

Status fuse_attention(ir::Graph& g, const FuseOptions& opts) {
  MaskClasses masks;
  auto match = [&](const PatternView& pv, const ir::Node& n, std::vector<AttentionPlan>& plans) {
    match_attention(pv, n, opts, masks, plans);
  };
  auto apply = [&](ir::Graph& graph, AttentionPlan p) {
    const std::string name = p.name;
    const bool done = apply_attention_plan(graph, std::move(p), opts);
    if (!done) note(opts, name, "no attention: shape inference disagrees with the fused node");
    return done;
  };
  return run_fusion<AttentionPlan>(g, match, apply);
}

}  // namespace kiln::compiler
