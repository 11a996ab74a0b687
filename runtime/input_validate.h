// Checks what is given to Executor::run against the model: the input tensors (host tensors or
// views of caller memory) and the size S they imply, and the caller's output buffers. Pure (no
// CUDA); every error names the tensor and what disagreed (expected vs got).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "cache/status.h"
#include "kiln/tensor.h"

namespace kiln::runtime {

template <typename T>
struct InputBindingOf {
  std::vector<const T*> by_input;  // one per model input, in the model's order (borrowed)
  int64_t size = 1;                // S; 1 when no input depends on S
};
using InputBinding = InputBindingOf<Tensor>;
using ViewBinding = InputBindingOf<TensorView>;

// Names (unknown, missing and duplicate names are all listed), dtypes, ranks, every dim (a
// constant dim must match; the size axis must be coef*S+offset for one S >= 1), one S shared
// by all inputs, S in [1, max_size]; then for host tensors data byte length == numel * dtype
// size, for views a non-null data pointer (unless the tensor is empty).
Result<InputBinding> inputs_validate(const std::vector<TensorInfo>& specs,
                                     const std::vector<Tensor>& inputs, int64_t max_size);
Result<ViewBinding> inputs_validate(const std::vector<TensorInfo>& specs,
                                    const std::vector<TensorView>& inputs, int64_t max_size);

// The caller's output buffers at size `s`: each names a model output (any subset, each at most
// once; unknown and duplicate names are all listed), holds at least the output's bytes at `s`
// (capacity errors name both numbers), and has a non-null data pointer. Returns the model output
// index of each buffer, in the buffers' order.
Result<std::vector<size_t>> outputs_validate(const std::vector<TensorInfo>& specs,
                                             const std::vector<OutputView>& outputs, int64_t s);

// Bytes of `info` at size `s`; nullopt on overflow.
std::optional<int64_t> tensor_bytes_at(const TensorInfo& info, int64_t s);

}  // namespace kiln::runtime
