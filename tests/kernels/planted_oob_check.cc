// A planted bug for the GPU machine's sanitizer run (tools/run_gpu.sh, part `sanitize`): a kernel
// whose bounds check is off by one, so it writes one float past the end of its buffer. Run
// plainly it exits 0 (the stray write lands unnoticed); under
// `compute-sanitizer --tool memcheck --error-exitcode N` it must exit N — proof that the
// sanitizer run can fail. Exits 3 without a CUDA device, 1 when a CUDA or NVRTC call fails.
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <cstdio>
#include <string>

namespace {

constexpr const char* kSource = R"(
extern "C" __global__ void planted_oob(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) out[i] = 1.0f;  // the planted bug: i == n is one past the end
}
)";

bool cuda_ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  std::fprintf(stderr, "planted_oob: %s: %s\n", what, cudaGetErrorString(err));
  return false;
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "planted_oob: no CUDA device\n");
    return 3;
  }
  cudaDeviceProp prop{};
  if (!cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties")) return 1;
  nvrtcProgram prog = nullptr;
  if (nvrtcCreateProgram(&prog, kSource, "planted_oob.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS)
    return 1;
  const std::string arch =
      "--gpu-architecture=compute_" + std::to_string(prop.major * 10 + prop.minor);
  const char* options[] = {arch.c_str()};
  if (nvrtcCompileProgram(prog, 1, options) != NVRTC_SUCCESS) {
    std::fprintf(stderr, "planted_oob: NVRTC failed\n");
    return 1;
  }
  size_t ptx_size = 0;
  (void)nvrtcGetPTXSize(prog, &ptx_size);
  std::string ptx(ptx_size, '\0');
  (void)nvrtcGetPTX(prog, ptx.data());
  (void)nvrtcDestroyProgram(&prog);

  cudaLibrary_t lib = nullptr;
  cudaKernel_t kernel = nullptr;
  if (!cuda_ok(cudaLibraryLoadData(&lib, ptx.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0),
               "cudaLibraryLoadData") ||
      !cuda_ok(cudaLibraryGetKernel(&kernel, lib, "planted_oob"), "cudaLibraryGetKernel"))
    return 1;
  int n = 256;
  float* out = nullptr;
  if (!cuda_ok(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc")) return 1;
  void* args[] = {&out, &n};
  if (!cuda_ok(cudaLaunchKernel(reinterpret_cast<const void*>(kernel), dim3(2), dim3(256), args, 0,
                                nullptr),
               "cudaLaunchKernel") ||
      !cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize"))
    return 1;
  (void)cudaFree(out);
  (void)cudaLibraryUnload(lib);
  std::printf("planted_oob: the kernel ran (its out-of-bounds write went unnoticed)\n");
  return 0;
}
