#include "runtime/io_copy.h"

#include <optional>

#include "runtime/cuda_check.h"
#include "runtime/dim_math.h"

namespace kiln::runtime {
namespace {

// cudaMemcpy2D/cudaMemset2D reject pitches above the device's maximum (2^31-1 on current
// GPUs); above that, or for a single row, plain per-row copies are used.
constexpr int64_t kMaxPitch = INT32_MAX;

}  // namespace

Result<IoGeometry> io_geometry(const TensorInfo& info, int64_t s, int64_t p) {
  const auto es = static_cast<int64_t>(dtype_size(info.dtype));
  const size_t axis = info.size_axis < 0 ? 0 : static_cast<size_t>(info.size_axis);
  std::optional<int64_t> rows = 1, host = es, arena = es;
  for (size_t i = 0; i < info.dims.size(); ++i) {
    const DimSpec& d = info.dims[i];
    auto at_s = dim_eval(d.coef, d.offset, s), at_p = dim_eval(d.coef, d.offset, p);
    if (!at_s || !at_p || *at_s < 0 || *at_p < *at_s || !rows || !host || !arena)
      return internal_error("'" + info.name + "': bad dim " + std::to_string(i) + " at size " +
                            std::to_string(s) + "/" + std::to_string(p));
    if (info.size_axis >= 0 && i < axis) {
      rows = checked_mul(*rows, *at_s);
    } else {
      host = checked_mul(*host, *at_s);
      arena = checked_mul(*arena, *at_p);
    }
  }
  if (!rows || !host || !arena)
    return internal_error("'" + info.name + "': byte size overflows at size " + std::to_string(p));
  return IoGeometry{*rows, *host, *arena};
}

Status input_copy_in(const IoGeometry& g, void* arena_dst, const void* src_ptr, cudaStream_t stream,
                     const std::string& name, cudaMemcpyKind kind, unsigned char pad_byte) {
  auto* dst = static_cast<char*>(arena_dst);
  const auto* src = static_cast<const char*>(src_ptr);
  const auto width = static_cast<size_t>(g.host_row_bytes);
  const auto pitch = static_cast<size_t>(g.arena_row_bytes);
  const size_t pad = pitch - width;
  // Messages are built only on failure: this is the hot path.
  auto what = [&name] { return "copying input '" + name + "' into its static buffer"; };
  auto fill = [&name] { return "filling the padding of input '" + name + "'"; };
  if (g.rows == 0 || pitch == 0) return Status::ok_status();
  if (pad == 0) {  // no padding: rows are contiguous on both sides
    KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, width * static_cast<size_t>(g.rows), kind, stream),
                  what());
    return Status::ok_status();
  }
  if (g.rows > 1 && g.arena_row_bytes <= kMaxPitch) {
    if (width > 0)
      KILN_CUDA_TRY(cudaMemcpy2DAsync(dst, pitch, src, width, width, static_cast<size_t>(g.rows),
                                      kind, stream),
                    what());
    KILN_CUDA_TRY(
        cudaMemset2DAsync(dst + width, pitch, pad_byte, pad, static_cast<size_t>(g.rows), stream),
        fill());
    return Status::ok_status();
  }
  for (int64_t r = 0; r < g.rows; ++r) {
    char* row = dst + static_cast<size_t>(r) * pitch;
    if (width > 0)
      KILN_CUDA_TRY(cudaMemcpyAsync(row, src + static_cast<size_t>(r) * width, width, kind, stream),
                    what());
    KILN_CUDA_TRY(cudaMemsetAsync(row + width, pad_byte, pad, stream), fill());
  }
  return Status::ok_status();
}

Status output_copy_out(const IoGeometry& g, void* dst_ptr, const void* arena_src,
                       cudaStream_t stream, const std::string& name, cudaMemcpyKind kind) {
  auto* dst = static_cast<char*>(dst_ptr);
  const auto* src = static_cast<const char*>(arena_src);
  const auto width = static_cast<size_t>(g.host_row_bytes);
  const auto pitch = static_cast<size_t>(g.arena_row_bytes);
  auto what = [&name] { return "copying output '" + name + "' out of its static buffer"; };
  if (g.rows == 0 || width == 0) return Status::ok_status();
  if (width == pitch) {
    KILN_CUDA_TRY(cudaMemcpyAsync(dst, src, width * static_cast<size_t>(g.rows), kind, stream),
                  what());
    return Status::ok_status();
  }
  if (g.rows > 1 && g.arena_row_bytes <= kMaxPitch) {
    KILN_CUDA_TRY(
        cudaMemcpy2DAsync(dst, width, src, pitch, width, static_cast<size_t>(g.rows), kind, stream),
        what());
    return Status::ok_status();
  }
  for (int64_t r = 0; r < g.rows; ++r)
    KILN_CUDA_TRY(cudaMemcpyAsync(dst + static_cast<size_t>(r) * width,
                                  src + static_cast<size_t>(r) * pitch, width, kind, stream),
                  what());
  return Status::ok_status();
}

}  // namespace kiln::runtime
