// Pure pieces of the executor: IO copy geometry and the graph segments of each mode.
#include <gtest/gtest.h>

#include "runtime/io_copy.h"
#include "runtime/size_graphs.h"

namespace kiln::runtime {

// Found by argument-dependent lookup from the vector comparisons below.
bool operator==(const Segment& a, const Segment& b) {
  return a.first == b.first && a.last == b.last && a.captured == b.captured;
}

namespace {

TEST(IoGeometry, SizeAxisFirst) {
  TensorInfo x{"x", DType::kF32, {{1, 0}, {0, 96}}, 0};
  auto g = io_geometry(x, 3, 4);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->rows, 1);
  EXPECT_EQ(g->host_row_bytes, 3 * 96 * 4);
  EXPECT_EQ(g->arena_row_bytes, 4 * 96 * 4);
}

TEST(IoGeometry, SizeAxisInner) {
  TensorInfo y{"y", DType::kF16, {{0, 2}, {0, 48}, {2, 1}, {0, 5}}, 2};
  auto g = io_geometry(y, 3, 16);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->rows, 2 * 48);
  EXPECT_EQ(g->host_row_bytes, 7 * 5 * 2);
  EXPECT_EQ(g->arena_row_bytes, 33 * 5 * 2);
}

TEST(IoGeometry, NoSizeAxis) {
  TensorInfo c{"c", DType::kI64, {{0, 3}, {0, 5}}, -1};
  auto g = io_geometry(c, 3, 16);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->rows, 1);
  EXPECT_EQ(g->host_row_bytes, 3 * 5 * 8);
  EXPECT_EQ(g->arena_row_bytes, 3 * 5 * 8);
}

schema::Manifest pieces(std::initializer_list<bool> attention) {
  schema::Manifest m;
  for (bool a : attention) m.add_pieces()->set_is_attention(a);
  return m;
}

TEST(Segments, PerMode) {
  const auto m = pieces({false, true, false});
  EXPECT_EQ(segments_for_mode(m, CudaGraphMode::kFull), (std::vector<Segment>{{0, 3, true}}));
  EXPECT_EQ(segments_for_mode(m, CudaGraphMode::kNone), (std::vector<Segment>{{0, 3, false}}));
  EXPECT_EQ(segments_for_mode(m, CudaGraphMode::kPiecewise),
            (std::vector<Segment>{{0, 1, true}, {1, 2, false}, {2, 3, true}}));
  EXPECT_EQ(segments_for_mode(pieces({true, true, false, false, true}), CudaGraphMode::kPiecewise),
            (std::vector<Segment>{{0, 2, false}, {2, 4, true}, {4, 5, false}}));
  EXPECT_TRUE(segments_for_mode(pieces({}), CudaGraphMode::kFull).empty());
}

}  // namespace
}  // namespace kiln::runtime
