#include "compiler/backend/memory_plan.h"

#include <gtest/gtest.h>

#include "compiler/backend/lowering.h"
#include "compiler/frontend/canonicalize.h"
#include "compiler/frontend/onnx_import.h"
#include "tests/support/op_cases.h"

namespace kiln::compiler {
namespace {

// Every pair of buffers whose lifetimes overlap must occupy disjoint bytes, at every case.
TEST(MemoryPlan, LiveBuffersNeverOverlapAndAreAligned) {
  const int64_t max_size = 40;
  for (const auto& c : testing::op_cases()) {
    SCOPED_TRACE(c.name);
    auto g = onnx_import_bytes(c.model.bytes(), c.name, ".", {"batch", {}});
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    ASSERT_TRUE(canonicalize(*g).ok());
    auto p = lower_graph(*g);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    auto plan = plan_memory(*g, *p, max_size);
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();

    std::map<int, std::pair<int, int>> life;
    const int end = static_cast<int>(p->steps.size());
    auto touch = [&](int v, int s) {
      auto [it, fresh] = life.try_emplace(v, s, s);
      it->second.first = std::min(it->second.first, s);
      it->second.second = std::max(it->second.second, s);
    };
    for (int v : g->inputs) touch(v, 0), touch(v, end);
    for (int v : g->outputs) touch(v, end);
    for (int s = 0; s < end; ++s)
      for (int v : step_values(p->steps[s]))
        if (!g->values[v].constant) touch(v, s);
    for (const auto& [v, lt] : life) {
      ASSERT_TRUE(plan->arena_offset.count(v)) << g->values[v].name;
      EXPECT_EQ(plan->arena_offset.at(v) % kBufferAlignment, 0u);
      EXPECT_LE(plan->arena_offset.at(v) + *value_bytes(g->values[v], max_size), plan->arena_bytes);
    }
    for (const auto& [a, la] : life)
      for (const auto& [b, lb] : life) {
        if (a >= b || la.second < lb.first || lb.second < la.first) continue;
        const uint64_t a0 = plan->arena_offset.at(a),
                       a1 = a0 + *value_bytes(g->values[a], max_size);
        const uint64_t b0 = plan->arena_offset.at(b),
                       b1 = b0 + *value_bytes(g->values[b], max_size);
        EXPECT_TRUE(a1 <= b0 || b1 <= a0) << g->values[a].name << " and " << g->values[b].name;
      }
    for (const auto& [v, off] : plan->weight_offset) {
      EXPECT_EQ(off % kBufferAlignment, 0u);
      const auto& bytes = g->values[v].constant->bytes;
      ASSERT_LE(off + bytes.size(), plan->weights.size());
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), plan->weights.begin() + off));
    }
  }
}

TEST(MemoryPlan, DeadIntermediatesShareBytes) {
  // x -> a -> b -> c -> y: a and c are never live together, so the arena needs fewer bytes
  // than the sum of all buffers.
  auto b = testing::OnnxBuilder("chain").input("x", {std::string("batch"), int64_t{64}})
               .random_initializer("w", {64, 64})
               .node("MatMul", {"x", "w"}, {"a"}).node("MatMul", {"a", "w"}, {"b"})
               .node("MatMul", {"b", "w"}, {"c"}).node("MatMul", {"c", "w"}, {"y"}).output("y");
  auto g = onnx_import_bytes(b.bytes(), "chain", ".", {"batch", {}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto p = lower_graph(*g);
  ASSERT_TRUE(p.ok());
  auto plan = plan_memory(*g, *p, 16);
  ASSERT_TRUE(plan.ok());
  const uint64_t one = 16 * 64 * 4;  // 4096: already 256-aligned
  EXPECT_LT(plan->arena_bytes, 5 * one);
  EXPECT_GE(plan->arena_bytes, 3 * one);  // x and y live throughout, plus one intermediate
}

TEST(MemoryPlan, ValueBytesRejectsOverflow) {
  ir::Value v;
  v.name = "huge";
  v.dtype = DType::kF32;
  v.shape = {ir::DimExpr::constant(int64_t{1} << 40), ir::DimExpr::constant(int64_t{1} << 40)};
  auto r = value_bytes(v, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("huge"), std::string::npos);
}

}  // namespace
}  // namespace kiln::compiler
