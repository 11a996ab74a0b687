// kiln::Model: a verified, loaded artifact — weights on the device, cubins loaded, cuBLASLt
// algorithms chosen for every capture and compile size. Immutable after load: one Model may be
// shared by any number of executors and threads (see runtime/README.md, "Thread safety").
// Links only cudart, cuBLASLt and protobuf-lite (through kiln_cache).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/status.h"
#include "kiln/export.h"
#include "kiln/graph_mode.h"
#include "kiln/tensor.h"

namespace kiln {

// True when a CUDA device can be used; otherwise `why` says why ("no CUDA device: ...", or the
// context_lost message after a device fault: see StatusCode::kContextLost).
KILN_API bool cuda_device_available(std::string* why = nullptr);

// How the weights file reaches the device. kDirect: one cudaMemcpy from the memory-mapped file
// (the driver stages pageable memory itself). kPinnedStaging: one reader thread per core (at
// most 12) reads 4 MiB blocks through its own small ring of pinned buffers, hashing and
// uploading as it goes and checking each block's digest, so reading, hashing and copying overlap.
// kAuto picks by size (see weights_upload.h); LoadReport says which ran.
enum class WeightsUpload { kAuto, kDirect, kPinnedStaging };
KILN_API const char* weights_upload_name(WeightsUpload w);  // "auto", "direct", "pinned"

struct LoadOptions {
  // Hash (XXH3-64) every file the runtime loads — the weights and this GPU's cubins — in the
  // very bytes that are uploaded, against the manifest. Off: sizes are still checked.
  bool verify = true;
  WeightsUpload weights = WeightsUpload::kAuto;
  // On sm_90+ GPUs, launch the artifact's kernels with programmatic dependent launch (each
  // kernel's launch overlaps the previous kernel's run; the kernels wait for it before touching
  // memory), eagerly and inside captured graphs. Used only when the artifact's kernels support
  // it (artifacts from this compiler do). The environment variable KILN_PDL=0 turns it off too.
  bool programmatic_launch = true;
  // Called as the weights upload, with the bytes copied so far and the total (after each staged
  // chunk; once at the end for a direct copy), on the loading thread. For progress displays.
  std::function<void(int64_t bytes_done, int64_t bytes_total)> upload_progress = nullptr;
  // Trusted signers (cache/FORMAT.md, "Signature"), each the text of a `kiln keygen` .pub file
  // or just its 64 hex digits. When non-empty, load refuses an artifact that is unsigned, signed
  // by another key or changed since signing — every file BLAKE2b-hashed, before any manifest
  // field is interpreted or any CUDA call — with kFailedPrecondition and a message starting
  // "artifact signature check failed"; a malformed key is kInvalidArgument.
  std::vector<std::string> trusted_keys = {};
};

// Wall-clock milliseconds of each phase of Model::load.
struct LoadReport {
  double resolve_verify_ms = 0;  // find the artifact, read + check the manifest, stat its files
  double signature_ms = 0;       // LoadOptions::trusted_keys: hash every file, check the signature
  double validate_ms = 0;        // every manifest field, before any CUDA call
  double device_init_ms = 0;     // CUDA context, device facts, compatibility check
  double weights_ms = 0;         // allocate, read (+ hash), upload
  uint64_t weights_bytes = 0;
  WeightsUpload weights_strategy = WeightsUpload::kAuto;  // the strategy that ran
  bool verified = false;                                  // LoadOptions::verify
  double cubin_ms = 0;     // read (+ hash), cudaLibraryLoadData, kernel checks
  // Handle + algorithm choice for every GEMM at every planned size, on a thread of its own beside
  // the weights and cubins (so total_ms is less than the sum of the phases).
  double cublaslt_ms = 0;
  bool programmatic_launch = false;  // kernels launch with programmatic dependent launch
  double total_ms = 0;
};

namespace runtime {
struct ModelState;  // internal
}

class Model {
 public:
  // `dir` is an artifact directory or a cache root holding exactly one artifact. Validates the
  // manifest, checks it against this GPU (cache::artifact_check_compatible), uploads the
  // weights, loads the cubins and chooses the GEMM algorithms. Nothing is compiled. After a
  // device fault anywhere in the process it returns context_lost at once (runtime/README.md,
  // "Device faults").
  KILN_API static Result<std::shared_ptr<Model>> load(const std::filesystem::path& dir,
                                                      LoadOptions options = {});
  KILN_API ~Model();

  KILN_API const std::string& name() const;
  KILN_API const std::filesystem::path& artifact_dir() const;
  KILN_API const std::vector<TensorInfo>& inputs() const;
  KILN_API const std::vector<TensorInfo>& outputs() const;
  KILN_API int64_t max_size() const;
  KILN_API const std::vector<int64_t>& capture_sizes() const;
  KILN_API CudaGraphMode configured_mode() const;
  KILN_API const LoadReport& load_report() const;

  const runtime::ModelState& state() const { return *state_; }  // for the executor

 private:
  explicit Model(std::unique_ptr<runtime::ModelState> state);
  std::unique_ptr<runtime::ModelState> state_;
};

}  // namespace kiln
