#include "runtime/size_table.h"

#include <algorithm>
#include <string>

namespace kiln::runtime {

Result<SizeChoice> size_choose(const std::vector<int64_t>& captured, int64_t max_size, int64_t s) {
  if (s < 1 || s > max_size)
    return invalid_argument("size " + std::to_string(s) + " is outside [1, max_size " +
                            std::to_string(max_size) + "]");
  auto it = std::lower_bound(captured.begin(), captured.end(), s);
  if (it == captured.end()) return SizeChoice{s, false};
  return SizeChoice{*it, true};
}

}  // namespace kiln::runtime
