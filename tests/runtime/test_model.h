// The small model every runtime test uses, as a hand-built manifest:
//   piece 0 (graph):     h0 = x[S,K] @ W[K,N] + bias1           (GemmStep, epilogue BIAS)
//   piece 1 (attention): h1 = relu(h0 + b2)                      (kernel add_bias_relu, and
//                                                                 add_bias_relu_s16 for S=16)
//   piece 2 (graph):     z[S,N] = alpha*h1 + y[N,S]^T, zt = z^T  (kernel combine: f32 + i64 args)
// Inputs x [S,K] (size axis 0) and y [N,S] (size axis 1); outputs z [S,N] and zt [N,S].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schemas/manifest.pb.h"

namespace kiln::runtime::testing {

struct TestModelSpec {
  int64_t k = 96;
  int64_t n = 48;
  uint32_t max_size = 64;
  std::vector<uint32_t> capture_sizes = {4, 16, 32};
  std::vector<uint32_t> compile_sizes = {16};
  schema::CudaGraphMode mode = schema::CUDA_GRAPH_MODE_FULL;
  std::string arch = "sm_90";
  float alpha = 0.75f;
};

inline constexpr const char* kWeightsFile = "weights.bin";
std::string test_cubin_path(const TestModelSpec& spec);  // "kernels.sm_90.cubin"

struct TestWeights {
  std::vector<float> w;       // [K, N]
  std::vector<float> bias1;   // [N]
  std::vector<float> b2;      // [N]
  std::vector<uint8_t> blob;  // the weights file: each tensor at a 256-aligned offset
};
TestWeights test_weights(const TestModelSpec& spec, uint32_t seed);

// The manifest without files (ArtifactStage::publish fills them in).
schema::Manifest test_manifest(const TestModelSpec& spec);
// Adds FileEntries (weights, cubin) with the given sizes, for checks that read no files.
void test_manifest_add_files(schema::Manifest* m, const TestModelSpec& spec, uint64_t cubin_size);

// A test kernel's symbol, "add_bias_relu" or "combine" with its parameter signature
// (cache/kernel_signature.h), as the compiler names its kernels.
std::string test_symbol(const TestModelSpec& spec, const std::string& kernel);

// The CUDA source of the three kernels (N baked in), compiled by test_artifact.
std::string test_kernel_source(const TestModelSpec& spec);

// Float64 reference: x [S,K], y [N,S] -> z [S,N], zt [N,S].
void test_reference(const TestModelSpec& spec, const TestWeights& w, const std::vector<float>& x,
                    const std::vector<float>& y, int64_t s, std::vector<double>* z,
                    std::vector<double>* zt);

std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f);

}  // namespace kiln::runtime::testing
