// Publishes the test model (tests/runtime/test_model.h) as a real artifact: kernels compiled to
// a cubin with NVRTC (no GPU needed), weights blob, manifest — through cache::ArtifactStage.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/status.h"
#include "schemas/manifest.pb.h"
#include "tests/runtime/test_model.h"

namespace kiln::runtime::testing {

inline constexpr const char* kTestKey = "0123456789abcdef0123456789abcdef";

// NVRTC: the test kernels as a cubin for spec.arch.
Result<std::vector<uint8_t>> test_cubin(const TestModelSpec& spec);
// NVRTC: `source` (a variant of test_kernel_source(spec): same kernels, same signatures) as a
// cubin for spec.arch.
Result<std::vector<uint8_t>> test_cubin_from_source(const TestModelSpec& spec,
                                                    const std::string& source);

// Writes `weights` and `cubin` and publishes `m` under `root`; returns the artifact directory.
Result<std::filesystem::path> test_artifact_publish(const std::filesystem::path& root,
                                                    const TestModelSpec& spec, schema::Manifest m,
                                                    const std::vector<uint8_t>& weights,
                                                    const std::vector<uint8_t>& cubin,
                                                    const std::string& key = kTestKey);

struct TestArtifact {
  std::filesystem::path dir;
  TestModelSpec spec;
  TestWeights weights;
};

// The standard test model: test_manifest(spec), test_weights(spec, seed), test_cubin(spec).
Result<TestArtifact> test_artifact_build(const std::filesystem::path& root,
                                         const TestModelSpec& spec, uint32_t seed = 7);

}  // namespace kiln::runtime::testing
