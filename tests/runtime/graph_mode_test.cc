// The graph-mode helpers (vLLM CUDAGraphMode semantics) and the downgrade rules an executor
// applies to the mode it is asked for. Pure: no GPU.
#include "kiln/graph_mode.h"

#include <gtest/gtest.h>

#include "runtime/graph_mode_schema.h"
#include "runtime/mode_resolve.h"
#include "tests/runtime/test_model.h"

namespace kiln::runtime {
namespace {

constexpr CudaGraphMode kNone = CudaGraphMode::kNone, kPiecewise = CudaGraphMode::kPiecewise,
                        kFull = CudaGraphMode::kFull, kDecodeOnly = CudaGraphMode::kFullDecodeOnly,
                        kBoth = CudaGraphMode::kFullAndPiecewise;

TEST(GraphMode, NamesRoundTrip) {
  for (CudaGraphMode m : {kNone, kPiecewise, kFull, kDecodeOnly, kBoth}) {
    EXPECT_TRUE(cuda_graph_mode_valid(m));
    EXPECT_EQ(cuda_graph_mode_from_name(cuda_graph_mode_name(m)), m);
  }
  EXPECT_STREQ(cuda_graph_mode_name(kBoth), "FULL_AND_PIECEWISE");
  EXPECT_EQ(cuda_graph_mode_from_name("full"), std::nullopt);
  EXPECT_EQ(cuda_graph_mode_from_name(""), std::nullopt);
  EXPECT_FALSE(cuda_graph_mode_valid(static_cast<CudaGraphMode>(5)));
  EXPECT_FALSE(cuda_graph_mode_valid(static_cast<CudaGraphMode>(-1)));
  EXPECT_STREQ(cuda_graph_mode_name(static_cast<CudaGraphMode>(9)), "UNKNOWN");
}

// The manifest's wire enum is the C++ one shifted by its UNSPECIFIED = 0.
TEST(GraphMode, WireEnumRoundTrip) {
  for (CudaGraphMode m : kCudaGraphModes) {
    SCOPED_TRACE(cuda_graph_mode_name(m));
    EXPECT_EQ(static_cast<int>(graph_mode_to_schema(m)), static_cast<int>(m) + 1);
    EXPECT_EQ(graph_mode_from_schema(graph_mode_to_schema(m)), m);
  }
  EXPECT_EQ(graph_mode_to_schema(kDecodeOnly), schema::CUDA_GRAPH_MODE_FULL_DECODE_ONLY);
  EXPECT_EQ(graph_mode_to_schema(static_cast<CudaGraphMode>(9)),
            schema::CUDA_GRAPH_MODE_UNSPECIFIED);
  EXPECT_EQ(graph_mode_from_schema(schema::CUDA_GRAPH_MODE_UNSPECIFIED), kNone);
}

// The table of vLLM's CUDAGraphMode: (decode, mixed) per mode.
TEST(GraphMode, DecodeAndMixedModes) {
  struct Row {
    CudaGraphMode m, decode, mixed;
    bool full, piecewise, separate;
  };
  const Row rows[] = {
      {kNone, kNone, kNone, false, false, false},
      {kPiecewise, kPiecewise, kPiecewise, false, true, false},
      {kFull, kFull, kFull, true, false, false},
      {kDecodeOnly, kFull, kNone, true, false, true},
      {kBoth, kFull, kPiecewise, true, true, true},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(cuda_graph_mode_name(r.m));
    EXPECT_EQ(decode_mode(r.m), r.decode);
    EXPECT_EQ(mixed_mode(r.m), r.mixed);
    EXPECT_EQ(has_full_cudagraphs(r.m), r.full);
    EXPECT_EQ(has_piecewise_cudagraphs(r.m), r.piecewise);
    EXPECT_EQ(separate_routine(r.m), r.separate);
  }
}

GraphModeFacts facts(size_t capture_sizes, size_t pieces, size_t capturable) {
  GraphModeFacts f;
  f.capture_sizes = capture_sizes;
  f.pieces = pieces;
  f.capturable_pieces = capturable;
  return f;
}

TEST(ModeResolve, SupportedModesAreKept) {
  for (CudaGraphMode m : {kNone, kPiecewise, kFull}) {
    auto c = graph_mode_resolve(m, facts(3, 3, 2));
    EXPECT_EQ(c.requested, m);
    EXPECT_EQ(c.effective, m);
    EXPECT_TRUE(c.reason.empty()) << c.reason;
  }
}

TEST(ModeResolve, TupleModesRunTheirMixedModeUntilDecodeExists) {
  auto both = graph_mode_resolve(kBoth, facts(3, 3, 2));
  EXPECT_EQ(both.effective, kPiecewise);
  EXPECT_NE(both.reason.find("graph mode FULL_AND_PIECEWISE"), std::string::npos) << both.reason;
  EXPECT_NE(both.reason.find("compiled for generation"), std::string::npos) << both.reason;
  EXPECT_NE(both.reason.find("using PIECEWISE"), std::string::npos) << both.reason;
  auto decode_only = graph_mode_resolve(kDecodeOnly, facts(3, 3, 2));
  EXPECT_EQ(decode_only.effective, kNone);
  EXPECT_NE(decode_only.reason.find("graph mode FULL_DECODE_ONLY"), std::string::npos);
  EXPECT_NE(decode_only.reason.find("using NONE"), std::string::npos);
  // With decode, they would be kept (the decode work will set has_decode).
  GraphModeFacts with_decode = facts(3, 3, 2);
  with_decode.has_decode = true;
  EXPECT_EQ(graph_mode_resolve(kBoth, with_decode).effective, kBoth);
  EXPECT_EQ(graph_mode_resolve(kDecodeOnly, with_decode).effective, kDecodeOnly);
}

TEST(ModeResolve, WhatTheModelCannotSupport) {
  auto no_sizes = graph_mode_resolve(kFull, facts(0, 3, 2));
  EXPECT_EQ(no_sizes.effective, kNone);
  EXPECT_NE(no_sizes.reason.find("graph mode FULL: the artifact has no cudagraph_capture_sizes"),
            std::string::npos)
      << no_sizes.reason;
  auto all_attention = graph_mode_resolve(kPiecewise, facts(3, 2, 0));
  EXPECT_EQ(all_attention.effective, kNone);
  EXPECT_NE(all_attention.reason.find("every piece is an attention piece"), std::string::npos);
  // FULL captures attention pieces too.
  EXPECT_EQ(graph_mode_resolve(kFull, facts(3, 2, 0)).effective, kFull);
  auto empty = graph_mode_resolve(kFull, facts(3, 0, 0));
  EXPECT_EQ(empty.effective, kNone);
  EXPECT_NE(empty.reason.find("launch program is empty"), std::string::npos);
  // Two downgrades in a row: both reasons.
  auto twice = graph_mode_resolve(kBoth, facts(3, 2, 0));
  EXPECT_EQ(twice.effective, kNone);
  EXPECT_NE(twice.reason.find("compiled for generation"), std::string::npos) << twice.reason;
  EXPECT_NE(twice.reason.find("every piece is an attention piece"), std::string::npos);
  // NONE never needs a downgrade.
  EXPECT_TRUE(graph_mode_resolve(kNone, facts(0, 0, 0)).reason.empty());
}

TEST(ModeResolve, FactsFromTheTestManifest) {
  testing::TestModelSpec spec;
  GraphModeFacts f = graph_mode_facts(testing::test_manifest(spec));
  EXPECT_EQ(f.capture_sizes, 3u);
  EXPECT_EQ(f.pieces, 3u);
  EXPECT_EQ(f.capturable_pieces, 2u);  // piece 1 is the attention piece
  EXPECT_FALSE(f.has_decode);
}

}  // namespace
}  // namespace kiln::runtime
