// The contrib family (compiler/ops/contrib.cc, contrib_norm.cc): onnxruntime's com.microsoft
// MultiHeadAttention, GroupQueryAttention, Attention, Skip(Simplified)LayerNormalization,
// SimplifiedLayerNormalization, FastGelu and BiasGelu on hand-computed cases, cross-checks with
// ONNX Attention, and the errors for what kiln does not support. onnxruntime's own outputs are
// checked in op_models_test.cc.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/ir_harness.h"
#include "tests/support/op_test_util.h"

namespace kiln::compiler {
namespace {

using kiln::testing::import_text_ok;
using kiln::testing::random_inputs;
using kiln::testing::T;
using kiln::testing::tensors_close;

const std::string kHead = R"(<ir_version: 10, opset_import: ["" : 23, "com.microsoft" : 1]> )";

std::map<std::string, RefTensor> run(const std::string& body,
                                     const std::map<std::string, RefTensor>& in) {
  return kiln::testing::run(import_text_ok(kHead + body, ImportOptions{"", {}}), 1, in);
}

// Runs the graph on random inputs and returns its outputs (for cross-checks of two ops).
std::map<std::string, RefTensor> run_random(const std::string& body) {
  ir::Graph g = import_text_ok(kHead + body, ImportOptions{"", {}});
  return kiln::testing::run(g, 1, random_inputs(g, 1, 5));
}

void expect_error(const std::string& body, StatusCode code, const std::string& needle) {
  kiln::testing::expect_import_error(kHead + body, code, {needle}, "S");
}

// ---- MultiHeadAttention -------------------------------------------------------------------------

TEST(MultiHeadAttention, MatchesOnnxAttention) {
  auto out = run_random(R"(
    g (float[2, 3, 8] q, float[2, 4, 8] k, float[2, 4, 6] v) => (float[2, 3, 6] a,
                                                               float[2, 3, 6] b) {
      a = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v)
      b = Attention<q_num_heads = 2, kv_num_heads = 2>(q, k, v)
    })");
  ASSERT_EQ(out["a"].dims, (std::vector<int64_t>{2, 3, 6}));
  EXPECT_TRUE(tensors_close(out["a"], out["b"], 1e-14, 1e-15, "MHA vs Attention"));
}

TEST(MultiHeadAttention, BiasAndKeyPaddingMask) {
  // Q = 0 after the bias: the unmasked keys are averaged. The value bias adds 10.
  auto out = run(R"(
    g (float[1, 1, 1] q, float[1, 3, 1] k, float[1, 3, 1] v, float[3] b, int32[1, 3] m)
        => (float[1, 1, 1] y) { y = com.microsoft.MultiHeadAttention<num_heads = 1>(q, k, v, b, m) })",
                 {{"q", T({1, 1, 1}, {2})},
                  {"k", T({1, 3, 1}, {1, 2, 3})},
                  {"v", T({1, 3, 1}, {1, 2, 3})},
                  {"b", T({3}, {-2, 0, 10})},
                  {"m", T({1, 3}, {1, 1, 0}, DType::kI32)}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 1}, {11.5}), 1e-15, 0, "y"));
}

TEST(MultiHeadAttention, UnidirectionalAndAttentionBias) {
  // Row 0 sees key 0; row 1 both, with ln 3 added to key 1's score: weights 1/4, 3/4.
  auto out = run(R"(
    g (float[1, 2, 1] q, float[1, 2, 1] k, float[1, 2, 1] v, float[1, 1, 2, 2] ab)
        => (float[1, 2, 1] y) {
      y = com.microsoft.MultiHeadAttention<num_heads = 1, unidirectional = 1>(q, k, v, , , ab)
    })",
                 {{"q", T({1, 2, 1}, {0, 0})},
                  {"k", T({1, 2, 1}, {1, 2})},
                  {"v", T({1, 2, 1}, {4, 8})},
                  {"ab", T({1, 1, 2, 2}, {0, 5, 0, std::log(3.0)})}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 2, 1}, {4, 7}), 1e-15, 0, "y"));
}

TEST(MultiHeadAttention, Errors) {
  const std::string sig = "g (float[1, S, 8] q, float[1, S, 8] k, float[1, S, 8] v";
  expect_error(sig +
                   ", float[1, 2, 3, 4] pk) => (float y) { "
                   "y = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v, , , , pk) }",
               StatusCode::kUnimplemented, "input 6 (past state");
  expect_error(sig +
                   ") => (float y, float z) { "
                   "y, z = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v) }",
               StatusCode::kUnimplemented, "present_key / present_value / qk are not supported");
  expect_error(sig +
                   ", int32[1] m) => (float y) { "
                   "y = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v, , m) }",
               StatusCode::kUnimplemented, "only the 2-D [batch, total_sequence_length] 1/0 mask");
  expect_error(sig + ") => (float y) { y = com.microsoft.MultiHeadAttention(q, k, v) }",
               StatusCode::kInvalidArgument, "'num_heads' must be a positive head count");
  expect_error(sig +
                   ", float[10] b) => (float y) { "
                   "y = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v, b) }",
               StatusCode::kInvalidArgument, "bias is [10], expected");
  expect_error(
      "g (float[1, S, 8] q, float[1, 2, S, 4] k, float[1, 2, S, 4] v) => (float y) { "
      "y = com.microsoft.MultiHeadAttention<num_heads = 2>(q, k, v) }",
      StatusCode::kInvalidArgument, "only 3-D [B, L, hidden] is supported");
  expect_error(
      "g (float[1, S, 8] q) => (float y) { "
      "y = com.microsoft.MultiHeadAttention<num_heads = 2>(q) }",
      StatusCode::kUnimplemented, "packed QKV / KV");
}

// ---- GroupQueryAttention ------------------------------------------------------------------------

TEST(GroupQueryAttention, PromptIsCausalAndPresentsAreTheKeys) {
  // 2 query heads share 1 kv head; Q = 0 so row i averages values 0..i.
  auto out = run(R"(
    g (float[1, 3, 2] q, float[1, 3, 1] k, float[1, 3, 1] v, int32[1] sl, int32 total)
        => (float[1, 3, 2] y, float[1, 1, 3, 1] pk, float[1, 1, 3, 1] pv) {
      y, pk, pv = com.microsoft.GroupQueryAttention<num_heads = 2, kv_num_heads = 1>
          (q, k, v, , , sl, total)
    })",
                 {{"q", T({1, 3, 2}, {0, 0, 0, 0, 0, 0})},
                  {"k", T({1, 3, 1}, {1, 2, 3})},
                  {"v", T({1, 3, 1}, {3, 6, 12})},
                  {"sl", T({1}, {2}, DType::kI32)},
                  {"total", T({}, {3}, DType::kI32)}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 3, 2}, {3, 3, 4.5, 4.5, 7, 7}), 1e-15, 0, "y"));
  EXPECT_TRUE(tensors_close(out["pk"], T({1, 1, 3, 1}, {1, 2, 3}), 0, 0, "present_key"));
  EXPECT_TRUE(tensors_close(out["pv"], T({1, 1, 3, 1}, {3, 6, 12}), 0, 0, "present_value"));
}

TEST(GroupQueryAttention, PastMatchesOnnxAttention) {
  auto out = run_random(R"(
    g (float[2, 3, 16] q, float[2, 3, 8] k, float[2, 3, 8] v, float[2, 2, 4, 4] pk,
       float[2, 2, 4, 4] pv) => (float[2, 3, 16] a, float[2, 2, 7, 4] ak, float[2, 3, 16] b,
                                 float[2, 2, 7, 4] bk) {
      sl = Constant<value = int32[2] {6, 6}>()
      total = Constant<value = int32 {7}>()
      a, ak = com.microsoft.GroupQueryAttention<num_heads = 4, kv_num_heads = 2>
          (q, k, v, pk, pv, sl, total)
      b, bk = Attention<q_num_heads = 4, kv_num_heads = 2, is_causal = 1>(q, k, v, , pk, pv)
    })");
  ASSERT_EQ(out["ak"].dims, (std::vector<int64_t>{2, 2, 7, 4}));
  EXPECT_TRUE(tensors_close(out["a"], out["b"], 1e-14, 1e-15, "output"));
  EXPECT_TRUE(tensors_close(out["ak"], out["bk"], 0, 0, "present_key"));
}

TEST(GroupQueryAttention, PackedQkvMatchesSeparateInputs) {
  // (H + 2·Hkv)·D = (2 + 2)·8 = 32: query 16, key 8, value 8.
  auto out = run_random(R"(
    g (float[1, 3, 32] qkv) => (float[1, 3, 16] a, float[1, 3, 16] b) {
      sl = Constant<value = int32[1] {2}>()
      total = Constant<value = int32 {3}>()
      sizes = Constant<value = int64[3] {16, 8, 8}>()
      q, k, v = Split<axis = 2>(qkv, sizes)
      a = com.microsoft.GroupQueryAttention<num_heads = 2, kv_num_heads = 1>
          (qkv, , , , , sl, total)
      b = com.microsoft.GroupQueryAttention<num_heads = 2, kv_num_heads = 1>
          (q, k, v, , , sl, total)
    })");
  ASSERT_EQ(out["a"].dims, (std::vector<int64_t>{1, 3, 16}));
  EXPECT_TRUE(tensors_close(out["a"], out["b"], 0, 0, "packed vs separate"));
}

TEST(GroupQueryAttention, UnsupportedSeqlensAreRunTimeErrors) {
  ir::Graph g = import_text_ok(kHead + R"(
    g (float[1, 2, 2] q, float[1, 2, 2] k, float[1, 2, 2] v, int32[1] sl, int32 total)
        => (float[1, 2, 2] y) {
      y = com.microsoft.GroupQueryAttention<num_heads = 1, kv_num_heads = 1>
          (q, k, v, , , sl, total)
    })",
                               ImportOptions{"", {}});
  auto inputs = random_inputs(g, 1, 3);
  inputs["total"] = T({}, {2}, DType::kI32);
  inputs["sl"] = T({1}, {5}, DType::kI32);
  auto r = reference_run(g, 1, inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("seqlens_k + 1 = 6 is not supported"), std::string::npos)
      << r.status().message();
  inputs["sl"] = T({1}, {1}, DType::kI32);
  inputs["total"] = T({}, {4}, DType::kI32);
  r = reference_run(g, 1, inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("total_sequence_length must be past + sequence length = 2"),
            std::string::npos)
      << r.status().message();
}

TEST(GroupQueryAttention, Errors) {
  const std::string sig =
      "g (float[1, S, 8] q, float[1, S, 4] k, float[1, S, 4] v, int32[1] sl, int32 t) => (float "
      "y) ";
  expect_error(sig +
                   "{ y = com.microsoft.GroupQueryAttention<num_heads = 2, kv_num_heads = 1, "
                   "do_rotary = 1>(q, k, v, , , sl, t) }",
               StatusCode::kUnimplemented, "do_rotary = 1 is not supported");
  expect_error(sig +
                   "{ y = com.microsoft.GroupQueryAttention<num_heads = 2, kv_num_heads = 1, "
                   "local_window_size = 4>(q, k, v, , , sl, t) }",
               StatusCode::kUnimplemented, "local_window_size (sliding window) is not supported");
  expect_error(sig +
                   "{ y = com.microsoft.GroupQueryAttention<num_heads = 2, kv_num_heads = 1>"
                   "(q, k, v) }",
               StatusCode::kInvalidArgument, "inputs 5 (seqlens_k) and 6 (total_sequence_length)");
  expect_error(sig +
                   "{ y = com.microsoft.GroupQueryAttention<num_heads = 3, kv_num_heads = 2>"
                   "(q, k, v, , , sl, t) }",
               StatusCode::kInvalidArgument, "num_heads 3 is not a multiple of kv_num_heads 2");
  expect_error(
      "g (float[1, S, 8] q, float[1, 3, 4] k, float[1, 3, 4] v, int32[1] sl, int32 t) "
      "=> (float y) { y = com.microsoft.GroupQueryAttention<num_heads = 2, "
      "kv_num_heads = 1>(q, k, v, , , sl, t) }",
      StatusCode::kInvalidArgument, "(kv_sequence_length == sequence_length)");
  expect_error(
      "g (float[1, S, 8] q, float[1, S, 4] k, float[1, S, 4] v, int32[1] sl, int32 t, "
      "float[2] hs) => (float y) { y = com.microsoft.GroupQueryAttention<num_heads = 2, "
      "kv_num_heads = 1>(q, k, v, , , sl, t, , , , , hs) }",
      StatusCode::kUnimplemented, "input 11 (head_sink");
}

// ---- Attention ----------------------------------------------------------------------------------

TEST(MsAttention, PackedProjectionMasksAndCausality) {
  // hidden 1, one head: q = 0·x, k = v = x (+ bias 0) → rows average the visible x.
  const std::map<std::string, RefTensor> in = {{"x", T({1, 2, 1}, {1, 2})},
                                               {"w", T({1, 3}, {0, 1, 1})},
                                               {"b", T({3}, {0, 0, 0})},
                                               {"m", T({1, 2}, {1, 0}, DType::kI32)}};
  auto out = run(R"(
    g (float[1, 2, 1] x, float[1, 3] w, float[3] b, int32[1, 2] m)
        => (float[1, 2, 1] y, float[1, 2, 1] yu, float[1, 2, 1] ym) {
      y = com.microsoft.Attention<num_heads = 1>(x, w, b)
      yu = com.microsoft.Attention<num_heads = 1, unidirectional = 1>(x, w, b)
      ym = com.microsoft.Attention<num_heads = 1>(x, w, b, m)
    })",
                 in);
  EXPECT_TRUE(tensors_close(out["y"], T({1, 2, 1}, {1.5, 1.5}), 1e-15, 0, "y"));
  EXPECT_TRUE(tensors_close(out["yu"], T({1, 2, 1}, {1, 1.5}), 1e-15, 0, "unidirectional"));
  EXPECT_TRUE(tensors_close(out["ym"], T({1, 2, 1}, {1, 1}), 1e-15, 0, "mask_index"));
}

TEST(MsAttention, Errors) {
  const std::string sig = "g (float[2, S, 8] x, float[8, 24] w";
  expect_error(sig +
                   ", int32[2] m) => (float y) { "
                   "y = com.microsoft.Attention<num_heads = 2>(x, w, , m) }",
               StatusCode::kUnimplemented, "only the 2-D [batch, total_sequence_length] 1/0 mask");
  expect_error(sig +
                   ", float[2, 2, 2, 3, 4] p) => (float y) { "
                   "y = com.microsoft.Attention<num_heads = 2>(x, w, , , p) }",
               StatusCode::kUnimplemented, "input 4 (past) is not supported");
  expect_error(
      sig + ") => (float y, float z) { y, z = com.microsoft.Attention<num_heads = 2>(x, w) }",
      StatusCode::kUnimplemented, "output 1 (present) is not supported");
  expect_error(
      sig +
          ") => (float y) { "
          "y = com.microsoft.Attention<num_heads = 2, qkv_hidden_sizes = [8, 8, 4]>(x, w) }",
      StatusCode::kInvalidArgument, "must be 3 sizes adding up to the weights' 24 columns");
  expect_error(
      "g (float[2, S, 6] x, float[8, 24] w) => (float y) { "
      "y = com.microsoft.Attention<num_heads = 2>(x, w) }",
      StatusCode::kInvalidArgument, "weights rows vs input hidden size: 8 vs 6");
}

// ---- norms --------------------------------------------------------------------------------------

TEST(SkipLayerNormalization, AllFourOutputs) {
  // input + skip + bias = [2, 4]: mean 3, variance 1.
  auto out = run(R"(
    g (float[1, 1, 2] x, float[1, 1, 2] s, float[2] g, float[2] b, float[2] bias)
        => (float[1, 1, 2] y, float[1, 1, 1] mean, float[1, 1, 1] inv, float[1, 1, 2] sum) {
      y, mean, inv, sum = com.microsoft.SkipLayerNormalization<epsilon = 0.25>(x, s, g, b, bias)
    })",
                 {{"x", T({1, 1, 2}, {1, 2})},
                  {"s", T({1, 1, 2}, {0, 1})},
                  {"g", T({2}, {1, 2})},
                  {"b", T({2}, {0.5, 0.5})},
                  {"bias", T({2}, {1, 1})}});
  const double inv = 1 / std::sqrt(1.25);
  EXPECT_TRUE(tensors_close(out["y"], T({1, 1, 2}, {0.5 - inv, 0.5 + 2 * inv}), 1e-15, 0, "y"));
  EXPECT_TRUE(tensors_close(out["mean"], T({1, 1, 1}, {3}), 0, 0, "mean"));
  EXPECT_TRUE(tensors_close(out["inv"], T({1, 1, 1}, {inv}), 1e-15, 0, "inv_std_var"));
  EXPECT_TRUE(tensors_close(out["sum"], T({1, 1, 2}, {2, 4}), 0, 0, "input_skip_bias_sum"));
}

TEST(SkipLayerNormalization, SkipBroadcastsOverTheBatch) {
  auto out =
      run(R"(
    g (float[2, 1, 2] x, float[1, 2] s, float[2] g) => (float[2, 1, 2] y) {
      y = com.microsoft.SkipLayerNormalization(x, s, g)
    })",
          {{"x", T({2, 1, 2}, {1, 2, 5, 3})}, {"s", T({1, 2}, {0, 1})}, {"g", T({2}, {1, 1})}});
  // Rows [1, 3] and [5, 4]: normalised to ±1 (epsilon 1e-12 default) and ±1.
  EXPECT_TRUE(tensors_close(out["y"], T({2, 1, 2}, {-1, 1, 1, -1}), 1e-11, 0, "y"));
}

TEST(SimplifiedLayerNormalization, RmsInBothDomains) {
  auto out = run(R"(
    g (float[1, 2] x, float[2] g) => (float[1, 2] y, float[1, 1] inv, float[1, 2] z) {
      y, inv = SimplifiedLayerNormalization<epsilon = 0.0>(x, g)
      z = com.microsoft.SimplifiedLayerNormalization<epsilon = 0.0>(x, g)
    })",
                 {{"x", T({1, 2}, {3, 4})}, {"g", T({2}, {1, 2})}});
  const double r = 1 / std::sqrt(12.5);
  EXPECT_TRUE(tensors_close(out["y"], T({1, 2}, {3 * r, 8 * r}), 1e-15, 0, "y"));
  EXPECT_TRUE(tensors_close(out["inv"], T({1, 1}, {r}), 1e-15, 0, "inv_std_var"));
  EXPECT_TRUE(tensors_close(out["z"], out["y"], 0, 0, "com.microsoft form"));
}

TEST(SimplifiedLayerNormalization, AxisCoversTrailingDims) {
  auto out = run(R"(
    g (float[1, 2, 2] x, float[2, 2] g) => (float[1, 2, 2] y) {
      y = SimplifiedLayerNormalization<axis = 1, epsilon = 0.0>(x, g)
    })",
                 {{"x", T({1, 2, 2}, {1, 1, 1, 1})}, {"g", T({2, 2}, {1, 2, 3, 4})}});
  EXPECT_TRUE(tensors_close(out["y"], T({1, 2, 2}, {1, 2, 3, 4}), 1e-15, 0, "y"));
}

TEST(SkipSimplifiedLayerNormalization, SumThenRms) {
  auto out = run(R"(
    g (float[1, 2] x, float[1, 2] s, float[2] g, float[2] b) => (float[1, 2] y,
                                                              float[1, 2] sum) {
      y, , , sum = com.microsoft.SkipSimplifiedLayerNormalization<epsilon = 0.0>(x, s, g, b)
    })",
                 {{"x", T({1, 2}, {1, 2})},
                  {"s", T({1, 2}, {1, 1})},
                  {"g", T({2}, {2, 1})},
                  {"b", T({2}, {1, 1})}});
  // sum [3, 4], rms sqrt(12.5).
  const double r = 1 / std::sqrt(12.5);
  EXPECT_TRUE(tensors_close(out["y"], T({1, 2}, {6 * r, 4 * r}), 1e-15, 0, "y"));
  EXPECT_TRUE(tensors_close(out["sum"], T({1, 2}, {3, 4}), 0, 0, "sum"));
}

TEST(ContribNorms, Errors) {
  expect_error(
      "g (float[2, S, 4] x, float[2, S, 4] s, float[3] g) => (float y) { "
      "y = com.microsoft.SkipLayerNormalization(x, s, g) }",
      StatusCode::kInvalidArgument, "gamma 'g' is [3], expected [4]");
  expect_error(
      "g (float[2, S, 4] x, float[3, 4] s, float[4] g) => (float y) { "
      "y = com.microsoft.SkipLayerNormalization(x, s, g) }",
      StatusCode::kInvalidArgument, "skip [3, 4] does not broadcast to [2, S, 4]");
  expect_error(
      "g (float[2, S, 4] x, float[4] g) => (float y) { "
      "y = SimplifiedLayerNormalization<axis = 3>(x, g) }",
      StatusCode::kInvalidArgument, "axis 3 is out of range");
  expect_error(
      "g (float[2, S, 4] x, float[3] g) => (float y) { "
      "y = com.microsoft.SimplifiedLayerNormalization(x, g) }",
      StatusCode::kInvalidArgument, "scale [3] must have as many elements as X");
  expect_error(
      "g (float[2, S, 4] x, float[2, S, 4] s, float[4] g, float[4] b, float[4] c, "
      "float[4] d) => (float y) { "
      "y = com.microsoft.SkipSimplifiedLayerNormalization(x, s, g, b, c) }",
      StatusCode::kInvalidArgument, "has 5 inputs, expected 3 to 4");
}

// ---- GELU ---------------------------------------------------------------------------------------

TEST(Gelu, FastGeluIsTheTanhFormBiasGeluTheErfForm) {
  auto out = run(R"(
    g (float[1, 3] x, float[3] b) => (float[1, 3] f, float[1, 3] e, float[1, 3] f0) {
      f = com.microsoft.FastGelu(x, b)
      e = com.microsoft.BiasGelu(x, b)
      f0 = com.microsoft.FastGelu(x)
    })",
                 {{"x", T({1, 3}, {-1, 0, 1})}, {"b", T({3}, {0, 0, 1})}});
  // Python math: 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) and 0.5·x·(1 + erf(x/√2)).
  EXPECT_TRUE(tensors_close(out["f"], T({1, 3}, {-0.15880800939172324, 0, 1.954597694087775}),
                            1e-15, 0, "FastGelu"));
  EXPECT_TRUE(tensors_close(out["e"], T({1, 3}, {-0.15865525393145707, 0, 1.9544997361036416}),
                            1e-15, 0, "BiasGelu"));
  EXPECT_TRUE(tensors_close(out["f0"], T({1, 3}, {-0.15880800939172324, 0, 0.8411919906082768}),
                            1e-15, 0, "FastGelu without bias"));
}

TEST(Gelu, Errors) {
  expect_error("g (float[2, S, 4] x) => (float y) { y = com.microsoft.BiasGelu(x) }",
               StatusCode::kInvalidArgument, "required input 1 is missing");
  expect_error("g (float[2, S, 4] x, float[3] b) => (float y) { y = com.microsoft.FastGelu(x, b) }",
               StatusCode::kInvalidArgument, "bias [3] does not broadcast to [2, S, 4]");
  expect_error("g (int32[2, S, 4] x) => (int32 y) { y = com.microsoft.FastGelu(x) }",
               StatusCode::kInvalidArgument, "expected a float tensor");
}

}  // namespace
}  // namespace kiln::compiler
