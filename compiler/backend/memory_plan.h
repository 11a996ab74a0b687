// Memory planning: arena offsets for every activation from step liveness (sized at max_size,
// so every size in [1, max_size] fits), and the packed, aligned weights blob.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "cache/status.h"
#include "compiler/backend/launch_plan.h"
#include "compiler/ir/ir.h"

namespace kiln::compiler {

inline constexpr uint64_t kBufferAlignment = 256;

struct MemoryPlan {
  std::map<int, uint64_t> arena_offset;  // value id → byte offset in the arena
  uint64_t arena_bytes = 0;
  std::map<int, uint64_t> weight_offset;  // constant value id → byte offset in the blob
  std::vector<uint8_t> weights;           // the blob, each tensor 256-aligned
};

// Bytes of `v` at size `s`; an error when it overflows or a dim is negative.
Result<uint64_t> value_bytes(const ir::Value& v, int64_t s);

// Graph inputs live for the whole program, graph outputs from their definition to the end,
// other activations from first to last use. Two activations share bytes only when their
// lifetimes do not overlap.
Result<MemoryPlan> plan_memory(const ir::Graph& g, const LoweredProgram& prog, int64_t max_size);

}  // namespace kiln::compiler
