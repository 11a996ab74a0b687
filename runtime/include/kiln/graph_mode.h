// kiln::CudaGraphMode and its helpers, with the semantics of vLLM's CUDAGraphMode: a mode is a
// pair (mode for decode batches, mode for mixed/prefill batches). FULL_DECODE_ONLY is
// (FULL, NONE), FULL_AND_PIECEWISE is (FULL, PIECEWISE), and NONE, PIECEWISE and FULL are the
// same mode for both. Decode batches exist only in generation models (kiln::Generator); any
// other model runs mixed_mode(requested) and logs why when that differs from what was asked for.
#pragma once

#include <array>
#include <optional>
#include <string_view>

#include "kiln/export.h"

namespace kiln {

// The numeric values are part of the C API (kiln/runtime.h, kiln_graph_mode): never renumber.
enum class CudaGraphMode {
  kNone = 0,              // the launch program runs eagerly
  kPiecewise = 1,         // one graph per run of non-attention pieces; attention runs eagerly
  kFull = 2,              // one graph per capture size
  kFullDecodeOnly = 3,    // decode FULL, mixed NONE
  kFullAndPiecewise = 4,  // decode FULL, mixed PIECEWISE
};

// Every mode, in numeric order.
inline constexpr std::array<CudaGraphMode, 5> kCudaGraphModes = {
    CudaGraphMode::kNone, CudaGraphMode::kPiecewise, CudaGraphMode::kFull,
    CudaGraphMode::kFullDecodeOnly, CudaGraphMode::kFullAndPiecewise};

// "NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"; "UNKNOWN" otherwise.
KILN_API const char* cuda_graph_mode_name(CudaGraphMode m);
// The inverse of cuda_graph_mode_name (exact, upper case); nullopt for anything else.
KILN_API std::optional<CudaGraphMode> cuda_graph_mode_from_name(std::string_view name);
// True for the five modes above (an enum may hold any int).
KILN_API bool cuda_graph_mode_valid(CudaGraphMode m);

// The mode used for decode batches: FULL for FULL, FULL_DECODE_ONLY and FULL_AND_PIECEWISE.
KILN_API CudaGraphMode decode_mode(CudaGraphMode m);
// The mode used for mixed (prefill or mixed prefill/decode) batches: FULL_DECODE_ONLY → NONE,
// FULL_AND_PIECEWISE → PIECEWISE, the single modes unchanged.
KILN_API CudaGraphMode mixed_mode(CudaGraphMode m);
// True when some batch kind gets full graphs (FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE).
KILN_API bool has_full_cudagraphs(CudaGraphMode m);
// True when some batch kind gets piecewise graphs (PIECEWISE, FULL_AND_PIECEWISE).
KILN_API bool has_piecewise_cudagraphs(CudaGraphMode m);
// True for the tuple modes, whose decode and mixed batches take different routes.
KILN_API bool separate_routine(CudaGraphMode m);

}  // namespace kiln
