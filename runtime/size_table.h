// Size → padded size: a request of size S runs at the smallest captured size P >= S (a graph
// replay), or eagerly at P = S when S is above every captured size but within max_size. Pure.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/status.h"

namespace kiln::runtime {

struct SizeChoice {
  int64_t padded = 0;   // P
  bool replay = false;  // P is a captured size
};

// `captured` is sorted ascending (empty in NONE mode: every size runs eagerly at P = S).
// invalid_argument for S < 1 or S > max_size, naming both.
Result<SizeChoice> size_choose(const std::vector<int64_t>& captured, int64_t max_size, int64_t s);

}  // namespace kiln::runtime
