// kiln::Model: a verified, loaded artifact — weights on the device, cubins loaded, plans made.
// Links only cudart, cuBLASLt and protobuf-lite (through kiln_cache).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache/status.h"
#include "runtime/tensor.h"

namespace kiln {

enum class CudaGraphMode { kNone, kPiecewise, kFull, kFullDecodeOnly, kFullAndPiecewise };
const char* cuda_graph_mode_name(CudaGraphMode m);

// True when a CUDA device can be used; otherwise `why` says why ("no CUDA device: ...").
bool cuda_device_available(std::string* why = nullptr);

namespace runtime {
struct ModelState;  // internal
}

class Model {
 public:
  // `dir` is an artifact directory or a cache root holding exactly one artifact. Verifies the
  // manifest and every file, checks the GPU arch, uploads weights, loads cubins.
  static Result<std::shared_ptr<Model>> load(const std::filesystem::path& dir);
  ~Model();

  const std::string& name() const;
  const std::filesystem::path& artifact_dir() const;
  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;
  int64_t max_size() const;
  const std::vector<int64_t>& capture_sizes() const;
  CudaGraphMode configured_mode() const;

  const runtime::ModelState& state() const { return *state_; }  // for the executor

 private:
  explicit Model(std::unique_ptr<runtime::ModelState> state);
  std::unique_ptr<runtime::ModelState> state_;
};

}  // namespace kiln
