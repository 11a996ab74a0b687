// Moving model inputs and outputs between host tensors at size S and their static arena
// buffers laid out at the padded size P. With the size axis a, a tensor is
// rows = prod(dims[:a]) rows of prod(dims[a:]) elements; the host row holds S's part, the arena
// row P's. Inputs copy the S part and zero the (P - S) padding of every row, so padding never
// carries stale values or NaN into the computation; outputs copy only the S part back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cache/status.h"
#include "runtime/tensor.h"

namespace kiln::runtime {

struct IoGeometry {
  int64_t rows = 1;
  int64_t host_row_bytes = 0;   // at S
  int64_t arena_row_bytes = 0;  // at P (>= host_row_bytes)
};

// Pure. `info` comes from a validated manifest (at most one axis depends on S).
Result<IoGeometry> io_geometry(const TensorInfo& info, int64_t s, int64_t p);

// Host -> arena, then zeroes the padding. `host` may be pageable.
Status input_copy_in(const IoGeometry& g, void* arena_dst, const void* host, cudaStream_t stream,
                     const std::string& name);

// Arena -> host (S part only). The caller synchronises the stream before reading `host`.
Status output_copy_out(const IoGeometry& g, void* host, const void* arena_src, cudaStream_t stream,
                       const std::string& name);

}  // namespace kiln::runtime
