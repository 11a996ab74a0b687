// fuse_attention: decomposed attention (MatMul, scale, mask, Softmax, MatMul) in the forms the
// exporters write becomes kiln.Attention, with the mask classified (none / causal / padding /
// general) by evaluation; near misses stay unfused. FuseExported (at the end) runs every fusion
// pass on the exported models under tests/models/exported.
#include "compiler/passes/fuse_attention.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <regex>
#include <string>

#include "compiler/config.h"
#include "compiler/frontend/canonicalize.h"
#include "compiler/frontend/onnx_tensor.h"
#include "compiler/passes/fuse_gelu.h"
#include "compiler/passes/fuse_norms.h"
#include "compiler/passes/fuse_rotary.h"
#include "compiler/passes/legalize_variants.h"
#include "tests/support/ir_harness.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

using kiln::testing::count_ops;
using kiln::testing::graphs_equivalent;
using kiln::testing::import_text_ok;
using kiln::testing::random_inputs;
using kiln::testing::tensors_close;

const std::string kHead = R"(<ir_version: 8, opset_import: ["" : 17]> )";
const std::string kQkv = "float[2, 2, N, 4] q, float[2, 2, N, 4] k, float[2, 2, N, 4] v";
const std::string kOut = " => (float[2, 2, N, 4] y) ";
const std::string kParams = R"(<float two = {2.0}, float half = {0.5}, float quarter = {0.25},
    float fzero = {0.0}, float fmin = {-3.4028234e38}, float mone = {-1.0}, float fone = {1.0},
    float small = {-100.0}, int64 izero = {0}, int64 ione = {1}, int64 itwo = {2}, int64 ten = {10},
    int64[1] ax0 = {0}, int64[1] ax1 = {1}, int64[2] ax12 = {1, 2}, int64[1] ax2 = {2},
    int64[3] c212 = {2, 1, 2}, int64[1] c4 = {4}, int64[2] c22 = {2, 2}>)";
// keep [N, N]: key j visible from query i when j <= i (built from the size, like exporters).
const std::string kCausalKeep = R"(
    n1 = Shape<start = 2, end = 3>(q)
    ns = Squeeze(n1, ax0)
    r = Range(izero, ns, ione)
    ri = Unsqueeze(r, ax1)
    rj = Unsqueeze(r, ax0)
    keep = LessOrEqual(rj, ri)
)";

struct Passed {
  ir::Graph before, after;
};

Passed run_pass(const std::string& sig, const std::string& body, int64_t max_size = 16) {
  Passed p;
  ImportOptions opts{"N", {}};
  opts.max_size = max_size;
  p.before = import_text_ok(kHead + "g (" + sig + ")" + kOut + kParams + "{" + body + "}", opts);
  p.after = p.before;
  Status st = fuse_attention(p.after, FuseOptions{max_size});
  EXPECT_TRUE(st.ok()) << st.message();
  return p;
}

const ir::Node* attention(const ir::Graph& g) {
  for (const ir::Node& n : g.nodes)
    if (n.domain == "kiln" && n.op == "Attention") return &n;
  return nullptr;
}

std::vector<std::string> input_names(const ir::Graph& g, const ir::Node& n) {
  std::vector<std::string> out;
  for (int id : n.inputs) out.push_back(id < 0 ? "" : g.values[id].name);
  return out;
}

// Like graphs_equivalent, with every int64 [B, N] input named like a mask drawn as an
// attention_mask (0/1 with the first key kept); other integer inputs in [0, 60) (token and
// position ids of the corpus models).
::testing::AssertionResult equivalent_masked(const ir::Graph& before, const ir::Graph& after,
                                             std::initializer_list<int64_t> sizes,
                                             const std::string& out = "y", double rtol = 1e-9,
                                             double atol = 1e-9) {
  for (int64_t s : sizes) {
    auto in = random_inputs(before, s, 7 + static_cast<uint32_t>(s), 60);
    std::mt19937 rng(static_cast<uint32_t>(s));
    for (auto& [name, t] : in)
      if (t.dtype == DType::kI64 && t.dims.size() == 2 && name.find("mask") != std::string::npos)
        for (size_t i = 0; i < t.data.size(); ++i)
          t.data[i] =
              i % static_cast<size_t>(t.dims[1]) == 0 ? 1.0 : static_cast<double>(rng() & 1);
    auto a = reference_run(before, s, in);
    std::map<std::string, RefTensor> in_after;
    for (int id : after.inputs) in_after[after.values[id].name] = in.at(after.values[id].name);
    auto b = reference_run(after, s, in_after);
    if (!a.ok() || !b.ok())
      return ::testing::AssertionFailure()
             << "S=" << s << ": " << (a.ok() ? b.status().message() : a.status().message());
    auto r = tensors_close(b->at(out), a->at(out), rtol, atol, out + " at S=" + std::to_string(s));
    if (!r) return r;
  }
  return ::testing::AssertionSuccess();
}

// ---- forms of Q·Kᵀ and scaling ------------------------------------------------------------------

TEST(FuseAttention, CausalAdditiveMaskDivScale) {
  Passed p = run_pass(kQkv, kCausalKeep + R"(
    cm = Where(keep, fzero, fmin)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Div(s, two)
    sm = Add(sc, cm)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(input_names(p.after, *a), (std::vector<std::string>{"q", "k", "v"}));
  EXPECT_DOUBLE_EQ(a->attr_float("scale", 0), 0.5);
  EXPECT_EQ(a->attr_int("causal", -1), 1);
  EXPECT_EQ(p.after.nodes.size(), 1u);  // the mask subgraph is gone too
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, Gpt2LayoutInsertsKeyTranspose) {
  // Q/K/V as [B, S, H, D]; K' = Transpose(k4, [0, 2, 3, 1]); scale as Mul on the scores.
  Passed p = run_pass("float[2, N, 2, 4] q4, float[2, N, 2, 4] k4, float[2, N, 2, 4] v4", R"(
    q = Transpose<perm = [0, 2, 1, 3]>(q4)
    v = Transpose<perm = [0, 2, 1, 3]>(v4)
    kt = Transpose<perm = [0, 2, 3, 1]>(k4)
    s = MatMul(q, kt)
    sc = Mul(s, half)
    pr = Softmax<axis = 3>(sc)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->inputs.size(), 3u);
  EXPECT_EQ(a->attr_int("causal", -1), 0);
  EXPECT_DOUBLE_EQ(a->attr_float("scale", 0), 0.5);
  const int kp = p.after.values[a->inputs[1]].producer;
  ASSERT_GE(kp, 0);
  const ir::Node& kt = p.after.nodes[static_cast<size_t>(kp)];
  EXPECT_EQ(kt.op, "Transpose");
  EXPECT_EQ(p.after.values[kt.inputs[0]].name, "k4");
  EXPECT_EQ(kt.attr_ints("perm"), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_EQ(count_ops(p.after, "Transpose"), 3);  // q, v and the new K
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, ExistingKeyTransposeIsReused) {
  // The graph already computes K = Transpose(k4, [0, 2, 1, 3]) (e.g. a present-key output).
  Passed p = run_pass("float[2, N, 2, 4] q4, float[2, N, 2, 4] k4, float[2, N, 2, 4] v4", R"(
    q = Transpose<perm = [0, 2, 1, 3]>(q4)
    kk = Transpose<perm = [0, 2, 1, 3]>(k4)
    v = Transpose<perm = [0, 2, 1, 3]>(v4)
    kt = Transpose<perm = [0, 2, 3, 1]>(k4)
    s = MatMul(q, kt)
    pr = Softmax(s)
    o = MatMul(pr, v)
    y = Add(o, kk))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(p.after.values[a->inputs[1]].name, "kk");
  EXPECT_EQ(count_ops(p.after, "Transpose"), 3);
  EXPECT_DOUBLE_EQ(a->attr_float("scale", 0), 1.0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, SdpaScalesQueryAndKey) {
  // torch's SDPA decomposition: sqrt(scale) on Q and on Kᵀ before the MatMul; K' not a
  // Transpose at all (a [B, H, D, S] input) gets one inserted.
  Passed p = run_pass("float[2, 2, N, 4] q, float[2, 2, 4, N] kt, float[2, 2, N, 4] v", R"(
    qs = Mul(q, half)
    ks = Mul(kt, half)
    s = MatMul(qs, ks)
    pr = Softmax<axis = -1>(s)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_DOUBLE_EQ(a->attr_float("scale", 0), 0.25);
  EXPECT_EQ(p.after.values[a->inputs[0]].name, "q");
  EXPECT_EQ(count_ops(p.after, "Transpose"), 1);
  EXPECT_EQ(count_ops(p.after, "Mul"), 0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, SdpaNanGuardAfterSoftmax) {
  // torch's SDPA export: an additive Where(keep, 0, -inf) mask, then Where(IsNaN(P), 0, P) so
  // that fully masked rows give zeros, which kiln.Attention yields for them too.
  Passed p = run_pass(kQkv, kCausalKeep + R"(
    ninf = Div(mone, fzero)
    am = Where(keep, fzero, ninf)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, am)
    pr = Softmax<axis = -1>(sm)
    nan = IsNaN(pr)
    pg = Where(nan, fzero, pr)
    y = MatMul(pg, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->attr_int("causal", -1), 1);
  EXPECT_EQ(count_ops(p.after, "IsNaN"), 0);
  EXPECT_EQ(count_ops(p.after, "Where"), 0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, ChainedCausalWhereThenPaddingAdd) {
  // transformers 4.x GPT-2 (eager): Where(causal, scores, min), then + (1 - attention_mask) * min.
  Passed p = run_pass(kQkv + ", int64[2, N] attention_mask", kCausalKeep + R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Div(s, two)
    cm = Where(keep, sc, fmin)
    mf = Cast<to = 1>(attention_mask)
    inv = Sub(fone, mf)
    pad = Mul(inv, fmin)
    pad4 = Unsqueeze(pad, ax12)
    sm = Add(cm, pad4)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->attr_int("causal", -1), 1);
  EXPECT_DOUBLE_EQ(a->attr_float("scale", 0), 0.5);
  ASSERT_EQ(a->inputs.size(), 5u);
  EXPECT_EQ(a->inputs[3], -1);
  EXPECT_EQ(p.after.values[a->inputs[4]].name, "attention_mask");
  EXPECT_TRUE(equivalent_masked(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, ChainedGeneralMaskIsMaterialisedAsOneSum) {
  // A causal Where and a learned bias input: general; the fused op gets bias + Where(keep, 0, min).
  Passed p = run_pass(kQkv + ", float[1, 2, N, N] bias", kCausalKeep + R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    cm = Where(keep, s, fmin)
    sm = Add(cm, bias)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->attr_int("causal", -1), 0);
  ASSERT_GE(a->inputs.size(), 4u);
  ASSERT_GE(a->inputs[3], 0);
  EXPECT_EQ(p.after.values[a->inputs[3]].shape.size(), 4u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, NotesSayWhyAttentionWasNotFormed) {
  ImportOptions opts{"N", {}};
  opts.max_size = 16;
  // A guard that zeroes something else than NaN is not the SDPA guard: no attention.
  ir::Graph g = kiln::testing::import_text_ok(kHead + "g (" + kQkv + ")" + kOut + kParams + R"({
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    pr = Softmax<axis = -1>(s)
    inf = IsInf(pr)
    pg = Where(inf, fzero, pr)
    y = MatMul(pg, v)})", opts);
  std::vector<AttentionNote> notes;
  ASSERT_TRUE(fuse_attention(g, FuseOptions{16, &notes}).ok());
  EXPECT_EQ(attention(g), nullptr);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].reason.find("not the first input of a MatMul (P·V)"), std::string::npos)
      << notes[0].reason;

  // A mask from two inputs: attention forms, the note says why its mask stays general.
  ir::Graph g2 = kiln::testing::import_text_ok(
      kHead + "g (" + kQkv + ", float[2, 1, N, N] m1, float[2, 1, N, N] m2)" + kOut + kParams +
          R"({
    m = Add(m1, m2)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, m)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v)})",
      opts);
  notes.clear();
  ASSERT_TRUE(fuse_attention(g2, FuseOptions{16, &notes}).ok());
  ASSERT_NE(attention(g2), nullptr);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].reason.find("stays a materialised input: it depends on 2 inputs ('m1', 'm2')"),
            std::string::npos)
      << notes[0].reason;
}

TEST(FuseAttention, WhereOnScoresAndCastsAroundSoftmax) {
  Passed p = run_pass(kQkv, kCausalKeep + R"(
    ninf = Div(mone, fzero)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Mul(s, quarter)
    sm = Where(keep, sc, ninf)
    smc = Cast<to = 1>(sm)
    pr = Softmax<axis = -1>(smc)
    prc = Cast<to = 1>(pr)
    y = MatMul(prc, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->attr_int("causal", -1), 1);
  EXPECT_EQ(a->inputs.size(), 3u);
  EXPECT_DOUBLE_EQ(a->attr_float("scale", 0), 0.25);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}, 1e-6, 1e-7));
}

TEST(FuseAttention, InvertedWhereCondition) {
  Passed p = run_pass(kQkv, kCausalKeep + R"(
    hide = Not(keep)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Where(hide, fmin, s)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->attr_int("causal", -1), 1);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, GroupedQueryRepeatUsesKvHeads) {
  // k/v have 1 head, repeated to 2 by Unsqueeze → Expand → Reshape (Hugging Face repeat_kv).
  Passed p = run_pass("float[2, 2, N, 4] q, float[2, 1, N, 4] k, float[2, 1, N, 4] v", R"(
    n1 = Shape<start = 2, end = 3>(q)
    es = Concat<axis = 0>(c212, n1, c4)
    rs = Concat<axis = 0>(c22, n1, c4)
    ku = Unsqueeze(k, ax2)
    ke = Expand(ku, es)
    kr = Reshape(ke, rs)
    vu = Unsqueeze(v, ax2)
    ve = Expand(vu, es)
    vr = Reshape(ve, rs)
    kt = Transpose<perm = [0, 1, 3, 2]>(kr)
    s = MatMul(q, kt)
    sc = Mul(s, half)
    pr = Softmax<axis = -1>(sc)
    y = MatMul(pr, vr))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(input_names(p.after, *a), (std::vector<std::string>{"q", "k", "v"}));
  EXPECT_EQ(count_ops(p.after, "Expand"), 0);
  EXPECT_EQ(p.after.nodes.size(), 1u);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

// ---- masks
// ---------------------------------------------------------------------------------------

TEST(FuseAttention, PaddingMaskFromAttentionMask) {
  // BERT: (1 - mask) · min added to the scores, mask [B, S] int64.
  Passed p = run_pass(kQkv + ", int64[2, N] mask", R"(
    mu = Unsqueeze(mask, ax12)
    mf = Cast<to = 1>(mu)
    inv = Sub(fone, mf)
    add = Mul(inv, fmin)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sc = Div(s, two)
    sm = Add(sc, add)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(input_names(p.after, *a), (std::vector<std::string>{"q", "k", "v", "", "mask"}));
  EXPECT_EQ(a->attr_int("causal", -1), 0);
  EXPECT_TRUE(equivalent_masked(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, CausalPlusPaddingMask) {
  Passed p = run_pass(kQkv + ", int64[2, N] mask", kCausalKeep + R"(
    mu = Unsqueeze(mask, ax12)
    mb = Cast<to = 9>(mu)
    both = And(keep, mb)
    cm = Where(both, fzero, fmin)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(cm, s)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(input_names(p.after, *a), (std::vector<std::string>{"q", "k", "v", "", "mask"}));
  EXPECT_EQ(a->attr_int("causal", -1), 1);
  EXPECT_TRUE(equivalent_masked(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, AllZeroMaskIsDropped) {
  Passed p = run_pass(kQkv, kCausalKeep + R"(
    cm = Where(keep, fzero, fzero)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, cm)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->inputs.size(), 3u);
  EXPECT_EQ(a->attr_int("causal", -1), 0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, NonCausalStaticMaskStaysAnInput) {
  // Anti-causal (j >= i) is not causal: fused with the additive mask kept as input 3.
  Passed p = run_pass(kQkv, kCausalKeep + R"(
    anti = GreaterOrEqual(rj, ri)
    cm = Where(anti, fzero, fmin)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, cm)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->inputs.size(), 4u);
  EXPECT_EQ(p.after.values[a->inputs[3]].name, "cm");
  EXPECT_EQ(a->attr_int("causal", -1), 0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, SoftMaskValuesStayAnInput) {
  // -100 is not a "masked" value (it only dampens): a general additive mask.
  Passed p = run_pass(kQkv, kCausalKeep + R"(
    cm = Where(keep, fzero, small)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, cm)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->inputs.size(), 4u);
  EXPECT_EQ(a->attr_int("causal", -1), 0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, GeneralWhereMaskBecomesAdditive) {
  // A bool mask input (two inputs would not be one attention_mask): Where(c, s, -inf) keeps a
  // general mask, converted to Where(c, 0, -inf) added to the scores.
  Passed p = run_pass(kQkv + ", bool[2, 1, N, N] c", R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Where(c, s, fmin)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->inputs.size(), 4u);
  EXPECT_EQ(count_ops(p.after, "Where"), 1);
  // Random bools may mask a whole row, where the two forms differ (uniform vs zeros); compare
  // with every row's first key kept.
  for (const int64_t s : {1, 2, 5, 9}) {
    auto in = random_inputs(p.before, s, 3);
    RefTensor& c = in.at("c");
    for (size_t i = 0; i < c.data.size(); i += static_cast<size_t>(s)) c.data[i] = 1;
    auto x = reference_run(p.before, s, in), z = reference_run(p.after, s, in);
    ASSERT_TRUE(x.ok() && z.ok());
    EXPECT_TRUE(tensors_close(z->at("y"), x->at("y"), 1e-9, 1e-9, "y"));
  }
}

TEST(FuseAttention, SlidingWindowIsCausalOnlyUpToTheWindow) {
  // Keys further than 9 back are masked too: causal for S <= 10, not beyond. With
  // max_size 16 the classification sees longer sizes and keeps the mask; with max_size 9
  // every size the graph runs at is causal.
  const std::string body = kCausalKeep + R"(
    diff = Sub(ri, rj)
    near = Less(diff, ten)
    both = And(keep, near)
    cm = Where(both, fzero, fmin)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, cm)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))";
  Passed wide = run_pass(kQkv, body, 16);
  ASSERT_NE(attention(wide.after), nullptr);
  EXPECT_EQ(attention(wide.after)->inputs.size(), 4u);
  EXPECT_EQ(attention(wide.after)->attr_int("causal", -1), 0);
  EXPECT_TRUE(graphs_equivalent(wide.before, wide.after, {1, 5, 12, 16}));
  Passed narrow = run_pass(kQkv, body, 9);
  ASSERT_NE(attention(narrow.after), nullptr);
  EXPECT_EQ(attention(narrow.after)->inputs.size(), 3u);
  EXPECT_EQ(attention(narrow.after)->attr_int("causal", -1), 1);
  EXPECT_TRUE(graphs_equivalent(narrow.before, narrow.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, PerKeyBiasFromOneInputStaysGeneral) {
  // One [B, S] input, but a float bias rather than a 0/1 attention_mask.
  Passed p = run_pass(kQkv + ", float[2, N] bias", R"(
    bu = Unsqueeze(bias, ax12)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, bu)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->inputs.size(), 4u);
  EXPECT_EQ(p.after.values[a->inputs[3]].name, "bu");
  EXPECT_EQ(a->attr_int("causal", -1), 0);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

TEST(FuseAttention, MaskFromTwoInputsStaysGeneral) {
  Passed p = run_pass(kQkv + ", float[2, 1, N, N] m1, float[2, 1, N, N] m2", R"(
    mm = Add(m1, m2)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, mm)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  const ir::Node* a = attention(p.after);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->inputs.size(), 4u);
  EXPECT_EQ(p.after.values[a->inputs[3]].name, "mm");
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5, 9}));
}

// ---- near misses stay unfused
// --------------------------------------------------------------------

void expect_unfused(const std::string& sig, const std::string& body) {
  Passed p = run_pass(sig, body);
  EXPECT_EQ(attention(p.after), nullptr) << body;
  EXPECT_EQ(count_ops(p.after, "Softmax"), 1) << body;
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}));
}

TEST(FuseAttention, NearMissesStayUnfused) {
  // Softmax over the query axis.
  expect_unfused(kQkv, R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    pr = Softmax<axis = 2>(s)
    y = MatMul(pr, v))");
  // Scale from an input, not a constant.
  expect_unfused(kQkv + ", float sc", R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    ss = Mul(s, sc)
    pr = Softmax<axis = -1>(ss)
    y = MatMul(pr, v))");
  // Where fill that does not mask (0).
  expect_unfused(kQkv, kCausalKeep + R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Where(keep, s, fzero)
    pr = Softmax<axis = -1>(sm)
    y = MatMul(pr, v))");
  // Probabilities on the right of the second MatMul.
  expect_unfused("float[2, 2, N, 4] q, float[2, 2, N, 4] k, float[2, 2, 4, N] v", R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    pr = Softmax<axis = -1>(s)
    o = MatMul(v, pr)
    y = Transpose<perm = [0, 1, 3, 2]>(o))");
  // Scores scaled after the mask (the mask would be scaled too).
  expect_unfused(kQkv, kCausalKeep + R"(
    cm = Where(keep, fzero, fmin)
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    sm = Add(s, cm)
    ss = Mul(sm, half)
    pr = Softmax<axis = -1>(ss)
    y = MatMul(pr, v))");
}

TEST(FuseAttention, BroadcastingQueryBatchStaysUnfused) {
  Passed p = run_pass("float[1, 2, N, 4] q, float[2, 2, N, 4] k, float[2, 2, N, 4] v", R"(
    kt = Transpose<perm = [0, 1, 3, 2]>(k)
    s = MatMul(q, kt)
    pr = Softmax<axis = -1>(s)
    y = MatMul(pr, v))");
  EXPECT_EQ(attention(p.after), nullptr);
  EXPECT_TRUE(graphs_equivalent(p.before, p.after, {1, 2, 5}));
}

// ---- the exported models -----------------------------------------------------------------------

namespace fs = std::filesystem;

// The value of `"key": N` in a small JSON file, -1 when absent.
int64_t json_int(const fs::path& file, const std::string& key) {
  std::ifstream f(file);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::smatch m;
  if (!std::regex_search(text, m, std::regex("\"" + key + "\"\\s*:\\s*(-?[0-9]+)"))) return -1;
  return std::stoll(m[1].str());
}

RefTensor read_pb(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  onnx::TensorProto t;
  EXPECT_TRUE(t.ParseFromIstream(&f)) << p;
  Result<OnnxConstant> c = onnx_tensor_to_constant(t, p.string(), p.parent_path());
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (!c.ok()) return {};
  ir::Value v;
  v.name = p.string();
  v.dtype = c->dtype;
  v.constant = c->constant;
  Result<RefTensor> r = reference_decode_constant(v);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : RefTensor{};
}

struct Exported {
  std::string name;
  int rms = 0, layer_norm = 0, gelu = 0, rotary = 0;  // fused ops expected after the passes
};

void PrintTo(const Exported& e, std::ostream* os) { *os << e.name; }

class FuseExported : public ::testing::TestWithParam<Exported> {};

TEST_P(FuseExported, FusesAndMatchesOnnxruntime) {
  const Exported& e = GetParam();
  const fs::path dir = kiln::testing::source_root() / "tests/models/exported" / e.name;
  Result<CompileConfig> cfg = config_load(dir / "kiln.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  ImportOptions opts{cfg->size_dim, cfg->dims};
  opts.max_size = cfg->max_size;
  Result<ir::Graph> imported = onnx_import_file(dir / "model.onnx", opts);
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  ir::Graph before = std::move(imported).value();
  ASSERT_TRUE(canonicalize(before).ok());
  ir::Graph g = before;
  ASSERT_TRUE(legalize_variants(g).ok());
  ASSERT_TRUE(fuse_norms(g).ok());
  ASSERT_TRUE(fuse_gelu(g).ok());
  ASSERT_TRUE(fuse_rotary(g).ok());
  Status st = fuse_attention(g, FuseOptions{cfg->max_size});
  ASSERT_TRUE(st.ok()) << st.to_string();
  if (std::getenv("KILN_DUMP_IR")) std::cout << ir::graph_to_text(g);

  EXPECT_EQ(count_ops(g, "Attention", "kiln"), json_int(dir / "expect.json", "attention_ops"));
  EXPECT_EQ(count_ops(g, "Softmax"), 0);
  EXPECT_EQ(count_ops(g, "RMSNormalization"), e.rms);
  EXPECT_EQ(count_ops(g, "LayerNormalization"), e.layer_norm);
  EXPECT_EQ(count_ops(g, "Gelu"), e.gelu);
  EXPECT_EQ(count_ops(g, "Rotary", "kiln"), e.rotary);
  // The same function as the unfused import, in float64 (attention_mask rows keep key 0).
  EXPECT_TRUE(equivalent_masked(before, g, {1, 3, 8}, g.values[g.outputs[0]].name, 1e-6, 1e-6));

  // onnxruntime's float32 outputs vs the float64 reference of the fused graph: float32
  // rounding through a few layers stays well inside rtol 1e-3 / atol 1e-4.
  for (int set = 0; set < 2; ++set) {
    const fs::path data = dir / ("test_data_set_" + std::to_string(set));
    std::map<std::string, RefTensor> in;
    for (size_t i = 0; i < before.inputs.size(); ++i) {
      const ir::Value& v = before.values[before.inputs[i]];
      in[v.name] = read_pb(data / ("input_" + std::to_string(i) + ".pb"));
      in[v.name].dtype = v.dtype;
    }
    const int64_t s = in.begin()->second.dims.back();
    Result<std::map<std::string, RefTensor>> out = reference_run(g, s, in);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    RefTensor want = read_pb(data / "output_0.pb");
    const std::string out_name = g.values[g.outputs[0]].name;
    want.dtype = out->at(out_name).dtype;
    EXPECT_TRUE(tensors_close(out->at(out_name), want, 1e-3, 1e-4, data.string()));
  }
}

// Fused op counts per family (2 layers): RMSNorm, LayerNorm, GELU, rotary.
Exported family_counts(const std::string& model) {
  const std::string f = model.substr(0, model.find('_', model.rfind("gpt_", 0) == 0 ? 4 : 0));
  if (f == "gpt2" || f == "bert" || f == "roberta") return {model, 0, 5, 2, 0};
  if (f == "distilbert") return {model, 0, 5, 2, 0};
  if (f == "gpt_neox") return {model, 0, 5, 2, 4};
  return {model, 5, 0, 0, 4};  // llama, qwen2, mistral, phi3
}

std::vector<Exported> fused_models() {
  std::vector<Exported> out;
  for (const char* m :
       {"gpt2_ts17_eager", "gpt2_ts17_sdpa", "gpt2_dynamo18", "gpt2_dynamo23", "gpt2_ortopt",
        "bert_ts17_eager", "bert_ts17_sdpa", "bert_dynamo18", "bert_dynamo23", "bert_ortopt",
        "llama_ts17_eager", "llama_ts17_sdpa", "llama_dynamo18", "llama_dynamo18_nomask",
        "qwen2_ts17_sdpa", "mistral_optimum", "phi3_dynamo18", "gpt_neox_ts17_sdpa",
        "distilbert_dynamo18", "roberta_ts17_sdpa"})
    out.push_back(family_counts(m));
  return out;
}

INSTANTIATE_TEST_SUITE_P(Models, FuseExported, ::testing::ValuesIn(fused_models()),
                         [](const ::testing::TestParamInfo<Exported>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace kiln::compiler
