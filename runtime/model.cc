#include "runtime/model.h"

#include <exception>
#include <new>
#include <utility>

#include "cache/artifact_verify.h"
#include "cache/cache_layout.h"
#include "runtime/manifest_validate.h"
#include "runtime/model_state.h"

namespace kiln {

const char* cuda_graph_mode_name(CudaGraphMode m) {
  switch (m) {
    case CudaGraphMode::kNone:
      return "NONE";
    case CudaGraphMode::kPiecewise:
      return "PIECEWISE";
    case CudaGraphMode::kFull:
      return "FULL";
    case CudaGraphMode::kFullDecodeOnly:
      return "FULL_DECODE_ONLY";
    case CudaGraphMode::kFullAndPiecewise:
      return "FULL_AND_PIECEWISE";
  }
  return "UNKNOWN";
}

Result<std::shared_ptr<Model>> Model::load(const std::filesystem::path& dir) {
  try {
    KILN_ASSIGN_OR_RETURN(std::filesystem::path artifact, cache::artifact_resolve(dir));
    KILN_ASSIGN_OR_RETURN(schema::Manifest manifest, cache::artifact_verify(artifact));
    Status valid = runtime::manifest_validate(manifest);
    if (!valid.ok()) return valid.with_context(artifact.string());
    auto state = runtime::model_state_create(std::move(manifest), artifact);
    std::string why;
    if (!cuda_device_available(&why)) return failed_precondition("no CUDA device: " + why);
    Status up = runtime::model_state_upload(*state);
    if (!up.ok()) return up.with_context("loading " + artifact.string());
    return std::shared_ptr<Model>(new Model(std::move(state)));
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of host memory loading '" + dir.string() + "'");
  } catch (const std::exception& e) {
    return internal_error("loading '" + dir.string() + "': " + e.what());
  }
}

Model::Model(std::unique_ptr<runtime::ModelState> state) : state_(std::move(state)) {}
Model::~Model() = default;

const std::string& Model::name() const { return state_->manifest.model_name(); }
const std::filesystem::path& Model::artifact_dir() const { return state_->dir; }
const std::vector<TensorInfo>& Model::inputs() const { return state_->inputs; }
const std::vector<TensorInfo>& Model::outputs() const { return state_->outputs; }
int64_t Model::max_size() const { return state_->manifest.config().max_size(); }
const std::vector<int64_t>& Model::capture_sizes() const { return state_->capture_sizes; }
CudaGraphMode Model::configured_mode() const { return state_->mode; }

}  // namespace kiln
