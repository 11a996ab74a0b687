#include "tests/runtime/test_artifact.h"

#include <nvrtc.h>

#include <memory>
#include <utility>

#include "cache/artifact_publish.h"

namespace kiln::runtime::testing {
namespace {

struct ProgramGuard {
  nvrtcProgram prog = nullptr;
  ~ProgramGuard() {
    if (prog != nullptr) nvrtcDestroyProgram(&prog);
  }
};

Status nvrtc_status(nvrtcResult r, const std::string& what) {
  if (r == NVRTC_SUCCESS) return Status::ok_status();
  return internal_error(what + ": " + nvrtcGetErrorString(r));
}

}  // namespace

Result<std::vector<uint8_t>> test_cubin(const TestModelSpec& spec) {
  return test_cubin_from_source(spec, test_kernel_source(spec));
}

Result<std::vector<uint8_t>> test_cubin_from_source(const TestModelSpec& spec,
                                                    const std::string& source) {
  ProgramGuard g;
  KILN_RETURN_IF_ERROR(nvrtc_status(
      nvrtcCreateProgram(&g.prog, source.c_str(), "runtime_test.cu", 0, nullptr, nullptr),
      "nvrtcCreateProgram"));
  const std::string arch = "--gpu-architecture=" + spec.arch;
  const char* options[] = {arch.c_str(), "--std=c++17"};
  nvrtcResult compiled = nvrtcCompileProgram(g.prog, 2, options);
  if (compiled != NVRTC_SUCCESS) {
    size_t log_size = 0;
    nvrtcGetProgramLogSize(g.prog, &log_size);
    std::string log(log_size, '\0');
    if (log_size > 0) nvrtcGetProgramLog(g.prog, log.data());
    return internal_error("NVRTC failed for " + spec.arch + ": " + nvrtcGetErrorString(compiled) +
                          "\n" + log + "\nsource:\n" + source);
  }
  size_t size = 0;
  KILN_RETURN_IF_ERROR(nvrtc_status(nvrtcGetCUBINSize(g.prog, &size), "nvrtcGetCUBINSize"));
  std::vector<uint8_t> cubin(size);
  KILN_RETURN_IF_ERROR(
      nvrtc_status(nvrtcGetCUBIN(g.prog, reinterpret_cast<char*>(cubin.data())), "nvrtcGetCUBIN"));
  return cubin;
}

Result<std::filesystem::path> test_artifact_publish(const std::filesystem::path& root,
                                                    const TestModelSpec& spec, schema::Manifest m,
                                                    const std::vector<uint8_t>& weights,
                                                    const std::vector<uint8_t>& cubin,
                                                    const std::string& key) {
  KILN_ASSIGN_OR_RETURN(auto stage, cache::ArtifactStage::begin(root, key));
  KILN_RETURN_IF_ERROR(stage->add_file(kWeightsFile, weights, schema::FILE_ROLE_WEIGHTS));
  KILN_RETURN_IF_ERROR(stage->add_file(test_cubin_path(spec), cubin, schema::FILE_ROLE_CUBIN));
  return stage->publish(std::move(m));
}

Result<TestArtifact> test_artifact_build(const std::filesystem::path& root,
                                         const TestModelSpec& spec, uint32_t seed) {
  TestArtifact art;
  art.spec = spec;
  art.weights = test_weights(spec, seed);
  KILN_ASSIGN_OR_RETURN(std::vector<uint8_t> cubin, test_cubin(spec));
  KILN_ASSIGN_OR_RETURN(
      art.dir, test_artifact_publish(root, spec, test_manifest(spec), art.weights.blob, cubin));
  return art;
}

}  // namespace kiln::runtime::testing
