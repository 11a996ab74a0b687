// Checks the tensors given to Executor::run against the model's inputs, and finds the size S
// they imply. Pure (no CUDA); every error names the input and what disagreed.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/status.h"
#include "runtime/tensor.h"

namespace kiln::runtime {

struct InputBinding {
  std::vector<const Tensor*> by_input;  // one per model input, in the model's order (borrowed)
  int64_t size = 1;                     // S; 1 when no input depends on S
};

// Names (unknown, missing and duplicate names are all listed), dtypes, ranks, every dim (a
// constant dim must match; the size axis must be coef*S+offset for one S >= 1), one S shared
// by all inputs, S in [1, max_size], and data byte length == numel * dtype size.
Result<InputBinding> inputs_validate(const std::vector<TensorInfo>& specs,
                                     const std::vector<Tensor>& inputs, int64_t max_size);

}  // namespace kiln::runtime
