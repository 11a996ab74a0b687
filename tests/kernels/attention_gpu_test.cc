// GPU: kiln.Attention kernels (kernels/attention.cuh, attention_decode.cuh) against the CPU
// reference, through the whole pipeline: ONNX Attention (opset 23) models that the front end
// turns into kiln.Attention — causal and not, GQA, key padding, an additive mask, head dims
// 16 / 64 / 128 (SIMT and tensor-core paths), one query row (split-key decode), and the GPT-2
// view chain (Split → Reshape → Transpose around attention) absorbed into one launch.
// Sizes 1, 3, 17, 1000 (max_size 1024), in fp32, fp16 and bf16. Every launch candidate of the
// prefill (tensor-core tile shapes, SIMT block sizes: the autotuner's choices) forced in turn.
//
// Tolerance: the end-to-end tolerance of tests/README.md for the precision (a softmax over up to
// 1000 keys and a weighted sum, accumulated in fp32 in a different order than the float64
// reference; P is rounded to the storage type before P·V on the tensor-core path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/reference/reference_compare.h"
#include "tests/support/gpu_model_check.h"

namespace kiln::testing {
namespace {

using compiler::Precision;
const std::string kS = "S";

GpuCheck check_for(Precision p, std::vector<int64_t> sizes = {1, 3, 17, 1000}) {
  GpuCheck c = gpu_check(p, std::move(sizes));
  c.max_size = 1024;
  c.tol = compiler::tolerance_end_to_end(p);
  c.tol_set = true;
  return c;
}

#define SKIP_WITHOUT_GPU()                         \
  do {                                             \
    std::string why;                               \
    if (!gpu_available(&why)) GTEST_SKIP() << why; \
  } while (0)

const Precision kPrecisions[] = {Precision::kF32, Precision::kF16, Precision::kBF16};

// y = Attention(q, k, v) on 4-D [B, H, S, D] inputs.
OnnxBuilder plain_model(int64_t hq, int64_t hkv, int64_t d, bool causal,
                        Dim sq = std::string("S")) {
  OnnxBuilder b("attention", 23);
  b.input("q", {int64_t{2}, hq, sq, d});
  b.input("k", {int64_t{2}, hkv, kS, d});
  b.input("v", {int64_t{2}, hkv, kS, d});
  b.node("Attention", {"q", "k", "v"}, {"y"}, {{"is_causal", int64_t{causal ? 1 : 0}}});
  b.output("y");
  return b;
}

TEST(AttentionGpu, CausalAndNotGqaHeadDims) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(1);
  for (int64_t d : {16, 64, 128})
    for (bool causal : {true, false})
      for (Precision p : kPrecisions) {
        SCOPED_TRACE("d=" + std::to_string(d) + " causal=" + std::to_string(causal) +
                     " precision=" + std::string(compiler::precision_name(p)));
        EXPECT_TRUE(gpu_model_matches_reference(plain_model(4, 2, d, causal), check_for(p), rng));
      }
}

TEST(AttentionGpu, HeadDims80And96) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(2);
  for (int64_t d : {80, 96})
    for (Precision p : {Precision::kF16, Precision::kBF16})
      EXPECT_TRUE(
          gpu_model_matches_reference(plain_model(2, 2, d, true), check_for(p, {3, 130}), rng))
          << "d=" << d;
}

TEST(AttentionGpu, KeyPaddingFromAttentionMask) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(3);
  for (int64_t d : {16, 64})
    for (Precision p : kPrecisions) {
      OnnxBuilder b("attention_kpad", 23);
      b.input("q", {int64_t{2}, int64_t{4}, kS, d});
      b.input("k", {int64_t{2}, int64_t{4}, kS, d});
      b.input("v", {int64_t{2}, int64_t{4}, kS, d});
      b.typed_input("am", onnx::TensorProto::INT64, {int64_t{2}, kS});
      b.node("Cast", {"am"}, {"amb"}, {{"to", int64_t{onnx::TensorProto::BOOL}}});
      b.int64_initializer("axes", {2}, {1, 2});
      b.node("Unsqueeze", {"amb", "axes"}, {"m"});
      b.node("Attention", {"q", "k", "v", "m"}, {"y"});
      b.output("y");
      GpuCheck c = check_for(p);
      c.int_high = 2;  // 0 = padding, 1 = kept (some rows fully padded: zeros)
      EXPECT_TRUE(gpu_model_matches_reference(b, c, rng)) << "d=" << d;
    }
}

TEST(AttentionGpu, AdditiveMask) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(4);
  for (int64_t d : {16, 64})
    for (Precision p : kPrecisions) {
      // The size is the batch here: a model input can have only one size-dependent axis, so
      // an input mask over a varying sequence ([S, S]) cannot exist; 24 keys, fixed.
      OnnxBuilder b("attention_mask", 23);
      b.input("q", {kS, int64_t{2}, int64_t{24}, d});
      b.input("k", {kS, int64_t{2}, int64_t{24}, d});
      b.input("v", {kS, int64_t{2}, int64_t{24}, d});
      b.input("mask", {int64_t{24}, int64_t{24}});
      b.node("Attention", {"q", "k", "v", "mask"}, {"y"});
      b.output("y");
      EXPECT_TRUE(gpu_model_matches_reference(b, check_for(p, {1, 3, 17, 300}), rng)) << "d=" << d;
    }
}

TEST(AttentionGpu, OneQueryRowSplitsKeys) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(5);
  for (int64_t d : {16, 64, 128})
    for (Precision p : kPrecisions) {
      // 8 (b, h) rows: the keys are split across blocks and combined in a second launch.
      EXPECT_TRUE(
          gpu_model_matches_reference(plain_model(4, 2, d, false, int64_t{1}), check_for(p), rng))
          << "d=" << d;
    }
}

// GPT-2 attention: QKV MatMul → Split → Reshape → Transpose, Attention, Transpose → Reshape →
// output MatMul. The views must cost no launch: one attention kernel and two GEMMs.
OnnxBuilder gpt2_model(int64_t heads, int64_t d) {
  const int64_t hidden = heads * d;
  OnnxBuilder b("gpt2_attention", 23);
  b.input("x", {int64_t{2}, kS, hidden});
  // Weights scaled by 1/sqrt(fan-in) as trained models have them, so activations stay O(1) and
  // the end-to-end tolerance (absolute 1e-3 in fp16) measures the kernels, not the magnitudes.
  const float r = 1.0f / std::sqrt(static_cast<float>(hidden));
  b.random_initializer("w", {hidden, 3 * hidden}, -r, r, 11);
  b.random_initializer("wo", {hidden, hidden}, -r, r, 12);
  b.int64_initializer("split", {3}, {hidden, hidden, hidden});
  b.int64_initializer("shp", {4}, {2, -1, heads, d});
  b.int64_initializer("shp2", {3}, {2, -1, hidden});
  b.node("MatMul", {"x", "w"}, {"qkv"});
  b.node("Split", {"qkv", "split"}, {"q2", "k2", "v2"}, {{"axis", int64_t{2}}});
  for (const char* t : {"q", "k", "v"}) {
    const std::string n(t);
    b.node("Reshape", {n + "2", "shp"}, {n + "3"});
    b.node("Transpose", {n + "3"}, {n}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  }
  b.node("Attention", {"q", "k", "v"}, {"a"}, {{"is_causal", int64_t{1}}});
  b.node("Transpose", {"a"}, {"at"}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  b.node("Reshape", {"at", "shp2"}, {"m"});
  b.node("MatMul", {"m", "wo"}, {"y"});
  b.output("y");
  return b;
}

TEST(AttentionGpu, Gpt2ViewsAbsorbed) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(6);
  for (int64_t d : {16, 64})
    for (Precision p : kPrecisions) {
      GpuCheckReport report;
      EXPECT_TRUE(gpu_model_matches_reference(gpt2_model(4, d), check_for(p), rng, &report))
          << "d=" << d << " " << report.detail;
      EXPECT_EQ(report.gemm_steps, 2);
      // f32: the attention kernel only; fp16/bf16 add the input and output Casts.
      if (p == Precision::kF32) {
        EXPECT_EQ(report.kernel_steps, 1) << report.detail;
      }
    }
}

TEST(AttentionGpu, CapturedPaddedCausal) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  GpuCheck c = check_for(Precision::kF16, {5, 17, 100});
  c.capture_sizes = {8, 32, 128};  // runs padded up to a captured size
  // Not debug mode: debug poisons padded rows with NaN, and the tensor-core kernel multiplies
  // masked probabilities (exact zeros) by the padded V rows of its diagonal tile: 0 × NaN is
  // NaN. Real padding is zeros, which cannot do that. (A known limit; see the issue note.)
  c.debug = false;
  EXPECT_TRUE(gpu_model_matches_reference(plain_model(4, 4, 64, true), c, rng));
}

// Each launch candidate (compiler/backend/lower/attention_codegen.h: attention_prefill_candidates)
// in turn, forced at every compile size: the tile shapes of every tensor-core head dim and both
// storage types (causal, not, GQA, key padding), and the SIMT block sizes. Sizes 1, 3, 17 and
// 200 (a partial query tile and partial key tiles of every block_n).
TEST(AttentionGpu, EveryLaunchCandidateMatchesReference) {
  SKIP_WITHOUT_GPU();
  std::mt19937 rng(8);
  // A key-padding model: key_padding [B, S] from an int mask (0 = padding), non-causal.
  auto kpad_model = [](int64_t d) {
    OnnxBuilder b("attention_kpad", 23);
    b.input("q", {int64_t{2}, int64_t{2}, kS, d});
    b.input("k", {int64_t{2}, int64_t{2}, kS, d});
    b.input("v", {int64_t{2}, int64_t{2}, kS, d});
    b.typed_input("am", onnx::TensorProto::INT64, {int64_t{2}, kS});
    b.node("Cast", {"am"}, {"amb"}, {{"to", int64_t{onnx::TensorProto::BOOL}}});
    b.int64_initializer("axes", {2}, {1, 2});
    b.node("Unsqueeze", {"amb", "axes"}, {"m"});
    b.node("Attention", {"q", "k", "v", "m"}, {"y"});
    b.output("y");
    return b;
  };
  struct Case {
    std::string name;
    OnnxBuilder model;
    Precision precision;
    size_t candidates;  // of its attention launch
  };
  const size_t simt = compiler::attention_simt_tile_candidates().size();
  auto mma = [](int64_t d) { return compiler::attention_mma_tile_candidates(d).size(); };
  const Case cases[] = {
      {"f16 d=64 causal gqa", plain_model(4, 2, 64, true), Precision::kF16, mma(64)},
      {"bf16 d=128 non-causal", plain_model(2, 2, 128, false), Precision::kBF16, mma(128)},
      {"bf16 d=80 causal", plain_model(2, 2, 80, true), Precision::kBF16, mma(80)},
      {"f16 d=96 key padding", kpad_model(96), Precision::kF16, mma(96)},
      {"f32 d=64 simt causal", plain_model(4, 2, 64, true), Precision::kF32, simt},
      {"bf16 d=16 simt key padding", kpad_model(16), Precision::kBF16, simt},
  };
  size_t most = 0;
  for (const Case& c : cases) most = std::max(most, c.candidates);
  for (size_t cand = 0; cand < most; ++cand)
    for (const Case& c : cases) {
      if (cand >= c.candidates) continue;
      SCOPED_TRACE(c.name + " candidate " + std::to_string(cand));
      GpuCheck check = check_for(c.precision, {1, 3, 17, 200});
      check.compile_sizes = check.sizes;
      check.candidate = static_cast<int>(cand);
      check.int_high = 2;  // key padding: 0 = padding, 1 = kept
      GpuCheckReport report;
      EXPECT_TRUE(gpu_model_matches_reference(c.model, check, rng, &report)) << report.detail;
      EXPECT_GT(report.tuned_launches, 0) << "candidate not used: " << report.detail;
    }
}

}  // namespace
}  // namespace kiln::testing
