// The median of a sample of timings: the one definition the runtime (Executor::time_device), the
// autotuners (graph replays) and the CLI (`kiln run`, `kiln bench`) report. Header-only, so the
// compiler and the tools may include it without linking anything.
#pragma once

#include <algorithm>
#include <vector>

namespace kiln::runtime {

// The middle value of the sorted sample for an odd count; for an even count the mean of the two
// middle values; 0 for an empty sample.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace kiln::runtime
