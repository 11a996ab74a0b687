#include "kiln/model.h"

#include <chrono>
#include <exception>
#include <new>
#include <utility>

#include "cache/artifact_signature.h"
#include "cache/artifact_verify.h"
#include "cache/cache_layout.h"
#include "runtime/context_lost.h"
#include "runtime/manifest_validate.h"
#include "runtime/model_state.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// LoadOptions::trusted_keys: the artifact must carry a valid signature by one of them over its
// current files. Nothing of the manifest is interpreted and no CUDA call is made before this.
Status signature_check(const std::filesystem::path& artifact, const schema::Manifest& manifest,
                       const std::vector<std::string>& trusted_keys) {
  if (trusted_keys.empty()) return Status::ok_status();
  std::vector<cache::PublicKey> keys;
  for (std::size_t i = 0; i < trusted_keys.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(cache::PublicKey k,
                          cache::public_key_parse(trusted_keys[i], "LoadOptions.trusted_keys[" +
                                                                       std::to_string(i) + "]"));
    keys.push_back(k);
  }
  return cache::artifact_signature_check(artifact, manifest, keys).status();
}

Result<std::unique_ptr<runtime::ModelState>> load_state(const std::filesystem::path& dir,
                                                        const LoadOptions& options) {
  const auto start = Clock::now();
  auto t0 = start;
  KILN_ASSIGN_OR_RETURN(std::filesystem::path artifact, cache::artifact_resolve(dir));
  // Files are checked for presence, type and size here; the ones the runtime loads are hashed
  // below in the very bytes that reach the device (one pass, nothing hashed twice).
  KILN_ASSIGN_OR_RETURN(schema::Manifest manifest,
                        cache::artifact_verify(artifact, /*hash_files=*/false));
  const double resolve_verify_ms = ms_since(t0);

  t0 = Clock::now();
  KILN_RETURN_IF_ERROR(signature_check(artifact, manifest, options.trusted_keys));
  const double signature_ms = ms_since(t0);

  t0 = Clock::now();
  Status valid = runtime::manifest_validate(manifest);
  if (!valid.ok()) return valid.with_context(artifact.string());
  auto state = runtime::model_state_create(std::move(manifest), artifact);
  state->report.resolve_verify_ms = resolve_verify_ms;
  state->report.signature_ms = signature_ms;
  state->report.validate_ms = ms_since(t0);

  std::string why;
  if (!cuda_device_available(&why)) return failed_precondition("no CUDA device: " + why);
  Status up = runtime::model_state_upload(*state, options);
  if (!up.ok()) return up.with_context("loading " + artifact.string());
  state->report.total_ms = ms_since(start);
  return state;
}

}  // namespace

const char* weights_upload_name(WeightsUpload w) {
  switch (w) {
    case WeightsUpload::kAuto:
      return "auto";
    case WeightsUpload::kDirect:
      return "direct";
    case WeightsUpload::kPinnedStaging:
      return "pinned";
  }
  return "unknown";
}

Result<std::shared_ptr<Model>> Model::load(const std::filesystem::path& dir, LoadOptions options) {
  try {
    KILN_RETURN_IF_ERROR(runtime::context_lost_check());
    if (options.weights != WeightsUpload::kAuto && options.weights != WeightsUpload::kDirect &&
        options.weights != WeightsUpload::kPinnedStaging)
      return invalid_argument("LoadOptions.weights: unknown strategy " +
                              std::to_string(static_cast<int>(options.weights)));
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<runtime::ModelState> state, load_state(dir, options));
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
const LoadReport& Model::load_report() const { return state_->report; }

}  // namespace kiln
