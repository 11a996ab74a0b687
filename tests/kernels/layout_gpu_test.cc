// GPU: the layout kernels (compiler/backend/lower/lower_layout.cc) against the CPU reference,
// through the whole pipeline, over sizes 1, 3, 17, 1000 and inner dims 1, 3, 17, 64 (odd lengths
// take the scalar paths, multiples of 8 the vector paths), in fp32, fp16 and bf16, and in every
// launch-configuration candidate.
//
// Pure data movement in fp32 must be exact (tolerance 0). In fp16/bf16 the Casts at the model
// boundary round, so the elementwise tolerance of tests/README.md applies.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <random>

#include "compiler/pipeline.h"
#include "tests/support/gpu_model_check.h"
#include "tests/support/temp_dir.h"

namespace kiln::testing {
namespace {

using compiler::Precision;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int kI64 = onnx::TensorProto::INT64;
constexpr int kI32 = onnx::TensorProto::INT32;
const Dim S = std::string("S");

using ModelOf = std::function<OnnxBuilder(int64_t d)>;

struct Case {
  Precision precision;
  std::vector<int64_t> dims;  // inner dims to sweep
};

// fp32 sweeps every inner dim; fp16/bf16 an odd one and a vector-friendly one.
std::vector<Case> cases() {
  return {
      {Precision::kF32, {1, 3, 17, 64}}, {Precision::kF16, {3, 64}}, {Precision::kBF16, {3, 64}}};
}

GpuCheck check_for(Precision p, bool exact_in_fp32, int64_t int_high = 4) {
  GpuCheck c = gpu_check(p, {1, 3, 17, 1000});
  if (p == Precision::kF32 && exact_in_fp32) {
    c.tol = {0.0, 0.0};
    c.tol_set = true;
  }
  c.int_high = int_high;
  return c;
}

void sweep(const ModelOf& model, bool exact_in_fp32, int64_t int_high = 4) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(1234);
  for (const Case& c : cases()) {
    for (int64_t d : c.dims) {
      SCOPED_TRACE(std::string(compiler::precision_name(c.precision)) + " inner dim " +
                   std::to_string(d));
      EXPECT_TRUE(gpu_model_matches_reference(
          model(d), check_for(c.precision, exact_in_fp32, int_high), rng));
    }
  }
}

TEST(LayoutGpu, ViewToGraphOutputCopies) {
  sweep(
      [](int64_t d) {
        return OnnxBuilder("view")
            .input("x", {S, d})
            .int64_initializer("shape", {1}, {-1})
            .node("Reshape", {"x", "shape"}, {"y"})
            .output("y");
      },
      true);
}

TEST(LayoutGpu, TransposeKeepingTheInnerAxis) {  // [B, S, H, D] → [B, H, S, D]
  sweep(
      [](int64_t d) {
        return OnnxBuilder("t0213")
            .input("x", {int64_t{2}, S, int64_t{4}, d})
            .node("Transpose", {"x"}, {"y"}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}})
            .output("y");
      },
      true);
}

TEST(LayoutGpu, TransposeMovingTheInnerAxis) {  // tiled when both sides are long enough
  sweep(
      [](int64_t d) {
        return OnnxBuilder("t021")
            .input("x", {S, d, int64_t{40}})
            .node("Transpose", {"x"}, {"y"}, {{"perm", std::vector<int64_t>{0, 2, 1}}})
            .output("y");
      },
      true);
  sweep(
      [](int64_t d) {
        return OnnxBuilder("t201")
            .input("x", {S, int64_t{3}, d})
            .node("Transpose", {"x"}, {"y"}, {{"perm", std::vector<int64_t>{2, 0, 1}}})
            .output("y");
      },
      true);
}

OnnxBuilder slice(int64_t d, std::vector<int64_t> st, std::vector<int64_t> en,
                  std::vector<int64_t> ax, std::vector<int64_t> sp) {
  const auto n = static_cast<int64_t>(st.size());
  return OnnxBuilder("slice")
      .input("x", {S, int64_t{24}, d})
      .int64_initializer("st", {n}, st)
      .int64_initializer("en", {n}, en)
      .int64_initializer("ax", {n}, ax)
      .int64_initializer("sp", {n}, sp)
      .node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"})
      .output("y");
}

TEST(LayoutGpu, Slice) {
  sweep([](int64_t d) { return slice(d, {0, 4}, {kMax, 12}, {0, 1}, {1, 1}); }, true);  // rows
  sweep([](int64_t d) { return slice(d, {2}, {20}, {1}, {3}); }, true);
  sweep([](int64_t d) { return slice(d, {-1, 0}, {-kMax, 1}, {2, 0}, {-1, 1}); }, true);
}

TEST(LayoutGpu, Concat) {
  sweep(
      [](int64_t d) {
        return OnnxBuilder("concat")
            .input("a", {S, d})
            .input("b", {S, 2 * d})
            .input("c", {S, int64_t{3}})
            .node("Concat", {"a", "b", "c"}, {"y"}, {{"axis", int64_t{1}}})
            .output("y");
      },
      true);
  sweep(
      [](int64_t d) {  // a constant block before the size axis
        return OnnxBuilder("concat0")
            .random_initializer("a", {2, d})
            .input("b", {S, d})
            .node("Concat", {"a", "b"}, {"y"}, {{"axis", int64_t{0}}})
            .output("y");
      },
      true);
}

TEST(LayoutGpu, SplitWritesEveryOutputInOneKernel) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  sweep(
      [](int64_t d) {
        return OnnxBuilder("split")
            .input("x", {S, 4 * d})
            .int64_initializer("sz", {3}, {d, d, 2 * d})
            .node("Split", {"x", "sz"}, {"a", "b", "c"}, {{"axis", int64_t{1}}})
            .output("a")
            .output("b")
            .output("c");
      },
      true);
  std::mt19937 rng(5);
  GpuCheckReport report;
  auto m = OnnxBuilder("split")
               .input("x", {S, int64_t{24}})
               .node("Split", {"x"}, {"a", "b", "c"}, {{"axis", int64_t{1}}})
               .output("a")
               .output("b")
               .output("c");
  EXPECT_TRUE(gpu_model_matches_reference(m, check_for(Precision::kF32, true), rng, &report));
  EXPECT_EQ(report.kernel_steps, 1);
}

TEST(LayoutGpu, GatherEmbeddingRows) {
  sweep(
      [](int64_t d) {
        return OnnxBuilder("embed")
            .typed_input("ids", kI64, {int64_t{2}, S})
            .random_initializer("table", {50, d})
            .node("Gather", {"table", "ids"}, {"y"})
            .output("y");
      },
      true, 50);
  sweep(
      [](int64_t d) {  // int32 indices
        return OnnxBuilder("embed32")
            .typed_input("ids", kI32, {S})
            .random_initializer("table", {50, d})
            .node("Gather", {"table", "ids"}, {"y"})
            .output("y");
      },
      true, 50);
}

// GatherND as dynamo exports it for BERT's mask: tuples (b, j) from the batch counter and the
// position counter Range(0, S, 1), joined on a new last axis.
OnnxBuilder gather_nd_positions(int64_t d) {
  return OnnxBuilder("gather_nd_pos")
      .input("x", {int64_t{2}, S, d})
      .int64_initializer("zero", {}, {0})
      .int64_initializer("one", {}, {1})
      .int64_initializer("two", {}, {2})
      .int64_initializer("ax0", {1}, {0})
      .int64_initializer("ax1", {1}, {1})
      .int64_initializer("last", {1}, {-1})
      .int64_initializer("two1", {1}, {2})
      .node("Shape", {"x"}, {"shp3"})
      .node("Gather", {"shp3", "one"}, {"n"})
      .node("Unsqueeze", {"n", "ax0"}, {"n1"})
      .node("Concat", {"two1", "n1"}, {"shp"}, {{"axis", int64_t{0}}})
      .node("Range", {"zero", "n", "one"}, {"pos"})
      .node("Unsqueeze", {"pos", "ax0"}, {"pos1"})
      .node("Expand", {"pos1", "shp"}, {"pos2"})
      .node("Unsqueeze", {"pos2", "last"}, {"pos3"})
      .node("Range", {"zero", "two", "one"}, {"bat"})
      .node("Unsqueeze", {"bat", "ax1"}, {"bat1"})
      .node("Expand", {"bat1", "shp"}, {"bat2"})
      .node("Unsqueeze", {"bat2", "last"}, {"bat3"})
      .node("Concat", {"bat3", "pos3"}, {"idx"}, {{"axis", int64_t{-1}}})
      .node("GatherND", {"x", "idx"}, {"y"})
      .output("y");
}

TEST(LayoutGpu, GatherNdTuples) {
  sweep(gather_nd_positions, true);
  sweep(
      [](int64_t d) {  // rows of a table by run-time 1-tuples
        return OnnxBuilder("gather_nd_rows")
            .typed_input("ids", kI64, {int64_t{2}, S, int64_t{1}})
            .random_initializer("table", {50, d})
            .node("GatherND", {"table", "ids"}, {"y"})
            .output("y");
      },
      true, 50);
  sweep(
      [](int64_t d) {  // 2-tuples of int32 into constant axes
        return OnnxBuilder("gather_nd_2")
            .random_initializer("table", {6, 5, d})
            .typed_input("ids", kI32, {S, int64_t{3}, int64_t{2}})
            .node("GatherND", {"table", "ids"}, {"y"})
            .output("y");
      },
      true, 5);
}

// Without a GPU: the BERT-style model compiles (the index chain, then one GatherND kernel), and
// a forced candidate goes into the artifact.
TEST(LayoutGpu, GatherNdCompilesWithoutAGpu) {
  compiler::CompileOutcome out;
  ASSERT_TRUE(compiles_with_candidate(gather_nd_positions(16), 0, &out));
  EXPECT_GE(out.kernel_steps, 2);
  EXPECT_GE(out.tuned_launches, 1);
}

TEST(LayoutGpu, GatherNdPositionsUnderPadding) {  // captured sizes: every run is padded
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(77);
  GpuCheck c = check_for(Precision::kF32, true);
  c.capture_sizes = {4, 32, 1024};
  EXPECT_TRUE(gpu_model_matches_reference(gather_nd_positions(3), c, rng));
}

TEST(LayoutGpu, ConstantOfShapeOfTheSize) {  // a fill (float 0) added to x
  sweep(
      [](int64_t d) {
        return OnnxBuilder("fill")
            .input("x", {S, d})
            .node("Shape", {"x"}, {"shp"})
            .node("ConstantOfShape", {"shp"}, {"z"})
            .node("Add", {"x", "z"}, {"y"})
            .output("y");
      },
      true);
}

TEST(LayoutGpu, GatherOnAnInnerAxisWithNegativeIndices) {
  sweep(
      [](int64_t d) {
        return OnnxBuilder("gather1")
            .input("x", {S, int64_t{7}, d})
            .int64_initializer("i", {2, 2}, {-1, 0, 6, -7})
            .node("Gather", {"x", "i"}, {"y"}, {{"axis", int64_t{1}}})
            .output("y");
      },
      true);
}

TEST(LayoutGpu, GatherElements) {
  sweep(
      [](int64_t d) {
        return OnnxBuilder("gather_el")
            .input("x", {S, int64_t{6}, d})
            .typed_input("i", kI64, {S, int64_t{4}, d})
            .node("GatherElements", {"x", "i"}, {"y"}, {{"axis", int64_t{1}}})
            .output("y");
      },
      true, 6);
}

TEST(LayoutGpu, RangeOfTheSize) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(9);
  // Range(-2, S, 1): S + 2 values from -2.
  auto m = OnnxBuilder("range")
               .input("x", {S, int64_t{4}})
               .int64_initializer("zero", {}, {0})
               .int64_initializer("start", {}, {-2})
               .int64_initializer("one", {}, {1})
               .node("Shape", {"x"}, {"shp"})
               .node("Gather", {"shp", "zero"}, {"n"})
               .node("Range", {"start", "n", "one"}, {"y"})
               .typed_output("y", kI64);
  EXPECT_TRUE(gpu_model_matches_reference(m, check_for(Precision::kF32, true), rng));
}

TEST(LayoutGpu, IntegerData) {  // Transpose, Slice, Concat, Gather of int64 tensors
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(11);
  auto m = OnnxBuilder("ints")
               .typed_input("x", kI64, {S, int64_t{6}})
               .int64_initializer("st", {1}, {1})
               .int64_initializer("en", {1}, {5})
               .int64_initializer("ax", {1}, {1})
               .int64_initializer("i", {2}, {0, 3})
               .node("Transpose", {"x"}, {"t"}, {{"perm", std::vector<int64_t>{1, 0}}})
               .node("Slice", {"x", "st", "en", "ax"}, {"s"})
               .node("Concat", {"x", "s"}, {"c"}, {{"axis", int64_t{1}}})
               .node("Gather", {"c", "i"}, {"g"}, {{"axis", int64_t{1}}})
               .typed_output("t", kI64)
               .typed_output("g", kI64);
  EXPECT_TRUE(gpu_model_matches_reference(m, check_for(Precision::kF32, true, 1000), rng));
}

// Rotary in fp16/bf16: see tolerance_rotary (compiler/reference/reference_compare.cc) for why.
GpuCheck rotary_check(Precision p) {
  GpuCheck c = gpu_check(p, {1, 3, 17, 1000});
  c.tol = compiler::tolerance_rotary(p);
  c.tol_set = true;
  c.int_high = 64;  // position ids index the 64-row caches
  return c;
}

OnnxBuilder rotary(int64_t head, int64_t rotary_dim, int64_t interleaved) {
  const int64_t half = (rotary_dim == 0 ? head : rotary_dim) / 2;
  return OnnxBuilder("rotary", 23)
      .input("x", {int64_t{2}, int64_t{4}, S, head})
      .random_initializer("cos", {64, half}, -1, 1, 3)
      .random_initializer("sin", {64, half}, -1, 1, 4)
      .typed_input("pos", kI64, {int64_t{2}, S})
      .node("RotaryEmbedding", {"x", "cos", "sin", "pos"}, {"y"},
            {{"rotary_embedding_dim", rotary_dim}, {"interleaved", interleaved}})
      .output("y");
}

TEST(LayoutGpu, RotaryHalfTables) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(21);
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16})
    for (auto [head, rdim, il] : {std::tuple<int64_t, int64_t, int64_t>{16, 0, 0},
                                  {16, 0, 1},
                                  {64, 32, 0},
                                  {64, 32, 1},
                                  {6, 2, 0},
                                  {7, 4, 1},     // odd rows: scalar reads, a copied tail of 3
                                  {72, 64, 0},   // a vector tail of 8
                                  {128, 0, 0}})  // 64 pairs a row, in units of 4 (fp32) or 8
    {
      SCOPED_TRACE(std::string(compiler::precision_name(p)) + " head " + std::to_string(head) +
                   " rotary " + std::to_string(rdim) + " interleaved " + std::to_string(il));
      EXPECT_TRUE(gpu_model_matches_reference(rotary(head, rdim, il), rotary_check(p), rng));
    }
}

TEST(LayoutGpu, RotaryFullTables) {  // Hugging Face's rotate_half pattern, fused by fuse_rotary
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(22);
  auto m = OnnxBuilder("rotary_full")
               .input("x", {int64_t{2}, int64_t{4}, S, int64_t{16}})
               .input("cos", {S, int64_t{16}})
               .input("sin", {S, int64_t{16}})
               .int64_initializer("z", {1}, {0})
               .int64_initializer("h", {1}, {8})
               .int64_initializer("e", {1}, {16})
               .int64_initializer("ax", {1}, {-1})
               .node("Slice", {"x", "z", "h", "ax"}, {"x1"})
               .node("Slice", {"x", "h", "e", "ax"}, {"x2"})
               .node("Neg", {"x2"}, {"nx2"})
               .node("Concat", {"nx2", "x1"}, {"rot"}, {{"axis", int64_t{-1}}})
               .node("Mul", {"x", "cos"}, {"a"})
               .node("Mul", {"rot", "sin"}, {"b"})
               .node("Add", {"a", "b"}, {"y"})
               .output("y");
  for (Precision p : {Precision::kF32, Precision::kF16, Precision::kBF16}) {
    SCOPED_TRACE(compiler::precision_name(p));
    GpuCheckReport report;
    EXPECT_TRUE(gpu_model_matches_reference(m, rotary_check(p), rng, &report));
    if (p == Precision::kF32) {
      EXPECT_EQ(report.kernel_steps, 1) << "expected one kiln.Rotary";
    }
  }
}

TEST(LayoutGpu, LongRowsOfAThousand) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(31);
  const int64_t d = 1000;
  GpuCheck c = check_for(Precision::kF32, true);
  c.sizes = {1, 3, 17};
  EXPECT_TRUE(gpu_model_matches_reference(
      OnnxBuilder("t")
          .input("x", {S, d, int64_t{40}})
          .node("Transpose", {"x"}, {"y"}, {{"perm", std::vector<int64_t>{0, 2, 1}}})
          .output("y"),
      c, rng));
  c.int_high = 50;
  EXPECT_TRUE(gpu_model_matches_reference(OnnxBuilder("embed")
                                              .typed_input("ids", kI64, {int64_t{2}, S})
                                              .random_initializer("table", {50, d})
                                              .node("Gather", {"table", "ids"}, {"y"})
                                              .output("y"),
                                          c, rng));
  EXPECT_TRUE(gpu_model_matches_reference(slice(d, {1}, {23}, {1}, {2}), c, rng));
}

// Every launch-configuration candidate (layout_candidates: 4 for the grid-stride kernels, 3 for
// the tiled transpose) against the CPU reference: candidate c of every launch that has one, at
// every compile size (the run sizes), on the vector, scalar and tiled paths of each kernel.
TEST(LayoutGpu, EveryLaunchCandidate) {
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  struct Model {
    std::string name;
    OnnxBuilder builder;
    int candidates;
    int64_t int_high = 4;
  };
  std::vector<Model> models;
  auto transpose = [](std::vector<Dim> dims, std::vector<int64_t> perm) {
    return OnnxBuilder("t")
        .input("x", dims)
        .node("Transpose", {"x"}, {"y"}, {{"perm", perm}})
        .output("y");
  };
  models.push_back({"tiled transpose", transpose({S, int64_t{48}, int64_t{40}}, {0, 2, 1}), 3});
  models.push_back(
      {"vector transpose", transpose({int64_t{2}, S, int64_t{4}, int64_t{64}}, {0, 2, 1, 3}), 4});
  // The innermost axis moves: the shared-memory tile path (3 candidates).
  models.push_back({"odd transpose", transpose({S, int64_t{3}, int64_t{17}}, {2, 0, 1}), 3});
  models.push_back({"slice", slice(17, {2}, {20}, {1}, {3}), 4});
  models.push_back({"concat",
                    OnnxBuilder("concat")
                        .input("a", {S, int64_t{8}})
                        .input("b", {S, int64_t{16}})
                        .node("Concat", {"a", "b"}, {"y"}, {{"axis", int64_t{1}}})
                        .output("y"),
                    4});
  models.push_back({"split",
                    OnnxBuilder("split")
                        .input("x", {S, int64_t{51}})
                        .int64_initializer("sz", {3}, {17, 17, 17})
                        .node("Split", {"x", "sz"}, {"a", "b", "c"}, {{"axis", int64_t{1}}})
                        .output("a")
                        .output("b")
                        .output("c"),
                    4});
  models.push_back({"gather rows",
                    OnnxBuilder("embed")
                        .typed_input("ids", kI64, {int64_t{2}, S})
                        .random_initializer("table", {50, 64})
                        .node("Gather", {"table", "ids"}, {"y"})
                        .output("y"),
                    4, 50});
  models.push_back({"gather elements",
                    OnnxBuilder("gather_el")
                        .input("x", {S, int64_t{6}, int64_t{17}})
                        .typed_input("i", kI64, {S, int64_t{4}, int64_t{17}})
                        .node("GatherElements", {"x", "i"}, {"y"}, {{"axis", int64_t{1}}})
                        .output("y"),
                    4, 6});
  models.push_back({"rotary", rotary(16, 0, 0), 4, 64});
  models.push_back({"gather nd", gather_nd_positions(16), 4});
  std::mt19937 rng(51);
  for (int c = 0; c < 4; ++c)
    for (const Model& m : models) {
      SCOPED_TRACE("candidate " + std::to_string(c) + ": " + m.name);
      GpuCheck check = check_for(Precision::kF32, m.name != "rotary", m.int_high);
      check.candidate = c;
      check.compile_sizes = check.sizes;
      GpuCheckReport report;
      EXPECT_TRUE(gpu_model_matches_reference(m.builder, check, rng, &report));
      if (c < m.candidates) {
        EXPECT_GT(report.tuned_launches, 0) << "no launch ran candidate " << c;
      } else {
        EXPECT_EQ(report.tuned_launches, 0);
      }
    }
}

// Without a GPU: a compile that forces candidate c compiles it into the artifact (NVRTC at the
// compile sizes, the manifest): every launch of a transpose through a shared tile and a split
// (a scalar grid-stride loop) but the last candidate of the tiled one, which has 3.
TEST(LayoutGpu, CandidatesCompileWithoutAGpu) {
  const auto model = OnnxBuilder("ts")
                         .input("x", {S, int64_t{48}, int64_t{40}})
                         .int64_initializer("sz", {2}, {17, 31})
                         .node("Transpose", {"x"}, {"t"}, {{"perm", std::vector<int64_t>{0, 2, 1}}})
                         .node("Split", {"t", "sz"}, {"a", "b"}, {{"axis", int64_t{2}}})
                         .output("a")
                         .output("b");
  for (int c = 0; c < 4; ++c) {
    SCOPED_TRACE("candidate " + std::to_string(c));
    compiler::CompileOutcome out;
    ASSERT_TRUE(compiles_with_candidate(model, c, &out));
    EXPECT_EQ(out.kernel_steps, 2);
    EXPECT_EQ(out.tuned_launches, c < 3 ? 2 : 1);
  }
}

TEST(LayoutGpu, PaddedRunsKeepRealRowsExact) {  // captured at 4 and 32: every run is padded
  std::string why;
  if (!gpu_available(&why)) GTEST_SKIP() << why;
  std::mt19937 rng(41);
  GpuCheck c = check_for(Precision::kF32, true);
  c.max_size = 32;
  c.sizes = {1, 3, 17};
  c.capture_sizes = {4, 32};
  EXPECT_TRUE(gpu_model_matches_reference(slice(8, {0, 4}, {kMax, 12}, {0, 1}, {1, 1}), c, rng));
  EXPECT_TRUE(
      gpu_model_matches_reference(OnnxBuilder("concat0")
                                      .random_initializer("a", {2, 8})
                                      .input("b", {S, int64_t{8}})
                                      .node("Concat", {"a", "b"}, {"y"}, {{"axis", int64_t{0}}})
                                      .output("y"),
                                  c, rng));
  EXPECT_TRUE(gpu_model_matches_reference(
      OnnxBuilder("t")
          .input("x", {int64_t{2}, S, int64_t{4}, int64_t{16}})
          .node("Transpose", {"x"}, {"y"}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}})
          .output("y"),
      c, rng));
  c.int_high = 64;
  c.tol_set = false;  // rotary computes in fp32 against a float64 reference
  EXPECT_TRUE(gpu_model_matches_reference(rotary(16, 0, 0), c, rng));
}

}  // namespace
}  // namespace kiln::testing
