// The one mapping between kiln::CudaGraphMode and the manifest's wire enum schema::CudaGraphMode
// (schemas/manifest.proto, where 0 is CUDA_GRAPH_MODE_UNSPECIFIED): the compiler writes modes
// with graph_mode_to_schema, the runtime reads them with graph_mode_from_schema.
#pragma once

#include "kiln/graph_mode.h"
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

// CUDA_GRAPH_MODE_UNSPECIFIED for a value outside the five modes.
schema::CudaGraphMode graph_mode_to_schema(CudaGraphMode m);
// kNone for UNSPECIFIED and unknown values (manifest_validate rejects both before any load).
CudaGraphMode graph_mode_from_schema(schema::CudaGraphMode m);

}  // namespace kiln::runtime
