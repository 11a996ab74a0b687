// Moving model inputs and outputs between caller memory (host or device) at size S and their
// static arena buffers laid out at the padded size P. With the size axis a, a tensor is
// rows = prod(dims[:a]) rows of prod(dims[a:]) elements; the caller's row holds S's part, the
// arena row P's. Inputs copy the S part and fill the (P - S) padding of every row — with zeros,
// so padding never carries stale values or NaN into the computation, or in debug mode with 0xFF
// bytes (NaN), so a padding row that leaked into a result would show; outputs copy only the S
// part back.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cache/status.h"
#include "kiln/tensor.h"

namespace kiln::runtime {

struct IoGeometry {
  int64_t rows = 1;
  int64_t host_row_bytes = 0;   // at S
  int64_t arena_row_bytes = 0;  // at P (>= host_row_bytes)
};

// Pure. `info` comes from a validated manifest (at most one axis depends on S).
Result<IoGeometry> io_geometry(const TensorInfo& info, int64_t s, int64_t p);

// Caller memory -> arena, then fills the padding with `pad_byte`. `kind` is
// cudaMemcpyHostToDevice (any host memory, pageable included) or cudaMemcpyDefault (device).
Status input_copy_in(const IoGeometry& g, void* arena_dst, const void* src, cudaStream_t stream,
                     const std::string& name, cudaMemcpyKind kind = cudaMemcpyHostToDevice,
                     unsigned char pad_byte = 0);

// Arena -> caller memory (S part only). `kind`: cudaMemcpyDeviceToHost or cudaMemcpyDefault.
// The caller synchronises the stream before reading `dst`.
Status output_copy_out(const IoGeometry& g, void* dst, const void* arena_src, cudaStream_t stream,
                       const std::string& name, cudaMemcpyKind kind = cudaMemcpyDeviceToHost);

}  // namespace kiln::runtime
