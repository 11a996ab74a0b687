#include "tests/runtime/gpu_fixture.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/cuda_check.h"

namespace kiln::runtime::testing {

GpuShared& gpu_shared() {
  static GpuShared s;
  return s;
}

Tensor f32_tensor(const std::string& name, std::vector<int64_t> shape,
                  const std::vector<float>& v) {
  Tensor t = Tensor::zeros(name, DType::kF32, std::move(shape));
  std::memcpy(t.data.data(), v.data(), v.size() * sizeof(float));
  return t;
}

Inputs make_inputs(int64_t s, uint32_t seed, float scale) {
  const TestModelSpec& spec = gpu_shared().art.spec;
  Inputs in;
  in.s = s;
  in.x = random_floats(static_cast<size_t>(s * spec.k), seed, -scale, scale);
  in.y = random_floats(static_cast<size_t>(spec.n * s), seed + 1000, -scale, scale);
  in.tensors = {f32_tensor("x", {s, spec.k}, in.x), f32_tensor("y", {spec.n, s}, in.y)};
  return in;
}

// GEMM tolerance for fp32 (tests/README.md): rtol 1e-5, atol 1e-5 * max(1, K/2048).
::testing::AssertionResult matches(const std::vector<Tensor>& out, const Inputs& in) {
  const TestModelSpec& spec = gpu_shared().art.spec;
  const int64_t s = in.s, n = spec.n;
  if (out.size() != 2) return ::testing::AssertionFailure() << out.size() << " outputs";
  const std::vector<int64_t> z_shape = {s, n}, zt_shape = {n, s};
  if (out[0].name != "z" || out[0].shape != z_shape || out[1].name != "zt" ||
      out[1].shape != zt_shape)
    return ::testing::AssertionFailure() << "output names/shapes differ at size " << s;
  std::vector<double> z, zt;
  test_reference(spec, gpu_shared().art.weights, in.x, in.y, s, &z, &zt);
  const double rtol = 1e-5, atol = 1e-5 * std::max(1.0, static_cast<double>(spec.k) / 2048.0);
  const std::vector<double>* want[] = {&z, &zt};
  for (int o = 0; o < 2; ++o) {
    if (out[o].data.size() != want[o]->size() * sizeof(float))
      return ::testing::AssertionFailure()
             << out[o].name << " has " << out[o].data.size() << " bytes";
    const float* got = out[o].as<float>();
    for (size_t i = 0; i < want[o]->size(); ++i) {
      const double b = (*want[o])[i];
      if (!std::isfinite(got[i]) || std::abs(got[i] - b) > atol + rtol * std::abs(b))
        return ::testing::AssertionFailure() << out[o].name << "[" << i << "] = " << got[i]
                                             << ", expected " << b << " (size " << s << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult bitwise_equal(const std::vector<Tensor>& a,
                                         const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].shape != b[i].shape || a[i].dtype != b[i].dtype)
      return ::testing::AssertionFailure() << "output " << i << " differs in name/shape/dtype";
    if (a[i].data != b[i].data) {
      size_t at = 0;
      while (at < a[i].data.size() && a[i].data[at] == b[i].data[at]) ++at;
      return ::testing::AssertionFailure()
             << "output '" << a[i].name << "' differs from byte " << at << " on";
    }
  }
  return ::testing::AssertionSuccess();
}

void ExecutorGpu::SetUpTestSuite() {
  GpuShared& s = gpu_shared();
  if (s.model != nullptr || !s.skip.empty() || !s.error.empty()) return;
  std::string why;
  if (!cuda_device_available(&why)) {
    s.skip = "no CUDA device: " + why;
    return;
  }
  auto arch = device_arch(0);
  if (!arch.ok()) {
    s.error = arch.status().to_string();
    return;
  }
  s.tmp = std::make_unique<kiln::testing::TempDir>();
  TestModelSpec spec;
  spec.arch = *arch;
  auto art = test_artifact_build(s.tmp->path(), spec);
  if (!art.ok()) {
    s.error = art.status().to_string();
    return;
  }
  s.art = *art;
  auto model = Model::load(s.art.dir);
  if (!model.ok()) {
    s.error = model.status().to_string();
    return;
  }
  s.model = *model;
}

// Released after each suite, while the CUDA runtime is still up (not at static destruction).
void ExecutorGpu::TearDownTestSuite() {
  GpuShared& s = gpu_shared();
  s.model.reset();
  s.tmp.reset();
  s.skip.clear();
  s.error.clear();
}

void ExecutorGpu::SetUp() {
  if (!gpu_shared().skip.empty()) GTEST_SKIP() << gpu_shared().skip;
  ASSERT_TRUE(gpu_shared().error.empty()) << gpu_shared().error;
}

std::unique_ptr<Executor> ExecutorGpu::make(std::optional<CudaGraphMode> mode, bool debug) {
  ExecutorOptions o;
  o.mode = mode;
  o.debug = debug;
  auto ex = Executor::create(gpu_shared().model, o);
  EXPECT_TRUE(ex.ok()) << ex.status().to_string();
  return ex.ok() ? std::move(*ex) : nullptr;
}

LogCapture::LogCapture() {
  previous = log_set_sink([this](std::string_view l) { lines.emplace_back(l); });
}
LogCapture::~LogCapture() { log_set_sink(previous); }
bool LogCapture::has(const std::string& needle) const {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(needle) != std::string::npos; });
}

int64_t device_free_bytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
  return static_cast<int64_t>(free);
}

DeviceBuffer::DeviceBuffer(size_t n) : bytes(n) {
  if (cudaMalloc(&ptr, n == 0 ? 1 : n) != cudaSuccess) ptr = nullptr;
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr != nullptr) (void)cudaFree(ptr);
}
// Synchronised: from pageable memory cudaMemcpy may return before the DMA lands, and the
// executors' streams do not wait for the legacy stream.
bool DeviceBuffer::upload(const void* host, size_t n) {
  return ptr != nullptr && n <= bytes &&
         cudaMemcpy(ptr, host, n, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaDeviceSynchronize() == cudaSuccess;
}
bool DeviceBuffer::download(void* host, size_t n) const {
  return ptr != nullptr && n <= bytes &&
         cudaMemcpy(host, ptr, n, cudaMemcpyDeviceToHost) == cudaSuccess;
}

DeviceInputs upload(const Inputs& in) {
  DeviceInputs d;
  const auto& t = in.tensors;
  d.x = std::make_unique<DeviceBuffer>(t[0].data.size());
  d.y = std::make_unique<DeviceBuffer>(t[1].data.size());
  EXPECT_TRUE(d.x->upload(t[0].data.data(), t[0].data.size()));
  EXPECT_TRUE(d.y->upload(t[1].data.data(), t[1].data.size()));
  d.views = {TensorView{"y", DType::kF32, t[1].shape, d.y->ptr, Memory::kDevice},
             TensorView{"x", DType::kF32, t[0].shape, d.x->ptr, Memory::kDevice}};
  return d;
}

}  // namespace kiln::runtime::testing
