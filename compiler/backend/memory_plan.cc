#include "compiler/backend/memory_plan.h"

#include "compiler/backend/lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace kiln::compiler {
namespace {

uint64_t align_up(uint64_t x) {
  return (x + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

struct Interval {
  int value;
  int first, last;
  uint64_t bytes;
  uint64_t offset = 0;
};

}  // namespace

Result<uint64_t> value_bytes(const ir::Value& v, int64_t s) {
  uint64_t n = dtype_size(v.dtype);
  if (n == 0) return invalid_argument(fmt::format("tensor '{}': no dtype", v.name));
  for (const auto& d : v.shape) {
    const int64_t e = d.eval(s);
    if (e < 0)
      return invalid_argument(
          fmt::format("tensor '{}': dim {} is {} at size {}", v.name, d.to_string(), e, s));
    if (e != 0 && n > std::numeric_limits<uint64_t>::max() / 4 / static_cast<uint64_t>(e))
      return invalid_argument(fmt::format("tensor '{}': {} bytes at size {} overflow", v.name,
                                          ir::shape_to_string(v.shape), s));
    n *= static_cast<uint64_t>(e);
  }
  return n;
}

Result<MemoryPlan> plan_memory(const ir::Graph& g, const LoweredProgram& prog, int64_t max_size) {
  MemoryPlan plan;
  const int end = static_cast<int>(prog.steps.size());
  std::map<int, Interval> live;
  auto touch = [&](int v, int step) {
    auto [it, fresh] = live.try_emplace(v, Interval{v, step, step, 0});
    if (!fresh) {
      it->second.first = std::min(it->second.first, step);
      it->second.last = std::max(it->second.last, step);
    }
  };
  for (int v : g.inputs) touch(resolve_alias(prog, v), 0), touch(resolve_alias(prog, v), end);
  for (int step = 0; step < end; ++step)
    for (int v : step_values(prog.steps[step]))
      if (!g.values[v].constant) touch(v, step);
  for (int out : g.outputs) {
    const int v = resolve_alias(prog, out);
    if (g.values[v].constant)
      return unimplemented(fmt::format("graph output '{}' is a constant", g.values[v].name));
    if (!live.count(v))
      return internal_error(
          fmt::format("graph output '{}' is produced by no step", g.values[v].name));
    touch(v, end);
  }

  // Greedy first fit, largest first: place each interval at the lowest offset that does not
  // collide with an already placed interval whose lifetime overlaps.
  std::vector<Interval> order;
  for (auto& [v, iv] : live) {
    KILN_ASSIGN_OR_RETURN(iv.bytes, value_bytes(g.values[v], max_size));
    iv.bytes = align_up(std::max<uint64_t>(iv.bytes, 1));
    order.push_back(iv);
  }
  std::stable_sort(order.begin(), order.end(),
                   [](const Interval& a, const Interval& b) { return a.bytes > b.bytes; });
  std::vector<Interval> placed;
  for (Interval iv : order) {
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (const Interval& p : placed)
      if (p.first <= iv.last && iv.first <= p.last) busy.emplace_back(p.offset, p.offset + p.bytes);
    std::sort(busy.begin(), busy.end());
    uint64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + iv.bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    iv.offset = offset;
    plan.arena_offset[iv.value] = offset;
    plan.arena_bytes = std::max(plan.arena_bytes, offset + iv.bytes);
    placed.push_back(iv);
  }

  // Weights: every constant a step reads, in first-use order.
  for (const LaunchStep& step : prog.steps) {
    for (int v : step_values(step)) {
      const ir::Value& val = g.values[v];
      if (!val.constant || plan.weight_offset.count(v)) continue;
      KILN_ASSIGN_OR_RETURN(uint64_t bytes, value_bytes(val, max_size));
      if (bytes != val.constant->bytes.size())
        return internal_error(fmt::format("constant '{}': {} bytes, shape says {}", val.name,
                                          val.constant->bytes.size(), bytes));
      const uint64_t offset = align_up(plan.weights.size());
      plan.weights.resize(offset, 0);
      plan.weights.insert(plan.weights.end(), val.constant->bytes.begin(),
                          val.constant->bytes.end());
      plan.weight_offset[v] = offset;
    }
  }
  return plan;
}

}  // namespace kiln::compiler
