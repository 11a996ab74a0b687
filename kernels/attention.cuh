// Placeholder: the attention kernel family (issue 4, in progress).
#pragma once
#include "common.cuh"
#include "dtype.cuh"

namespace kiln {}  // namespace kiln
