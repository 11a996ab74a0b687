// Can this artifact run on this device? Checked at load before any weights are uploaded, and by
// `kiln verify` on a GPU machine. Pure (no CUDA calls): the caller passes the device facts.
#pragma once

#include <string>
#include <string_view>

#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

struct DeviceFacts {
  std::string arch;        // "sm_90", from the device's compute capability
  int driver_version = 0;  // cudaDriverGetVersion: 13000 for CUDA 13.0
};

// failed_precondition naming both sides when: some module with kernels has no cubin for
// `arch` (an exact match, or the arch-specific "sm_90a" variant of it), or the driver's CUDA
// major version is older than the CUDA the artifact was built with
// ("artifact built with CUDA 13.0; this driver supports CUDA 12.4: update the driver").
// Also failed_precondition when the manifest's format version is not this kiln's.
Status artifact_check_compatible(const schema::Manifest& m, const DeviceFacts& device);

// The cubin of `mod` that runs on `arch`: the exact match, else its "a" variant ("sm_90a");
// otherwise failed_precondition naming both the artifact's archs and `arch`.
Result<const schema::Module::Cubin*> module_cubin_for(const schema::Module& mod,
                                                      std::string_view arch);

}  // namespace kiln::cache
