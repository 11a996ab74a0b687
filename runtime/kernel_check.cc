#include "runtime/kernel_check.h"

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/cuda_check.h"

namespace kiln::runtime {
namespace {

size_t arg_bytes(const schema::KernelArg& a) {
  switch (a.value_case()) {
    case schema::KernelArg::kF32:
      return sizeof(float);
    case schema::KernelArg::kBuffer:
    case schema::KernelArg::kRealSizePtr:
    case schema::KernelArg::kKv:
      return sizeof(void*);
    default:
      return sizeof(int64_t);
  }
}

const char* arg_kind(const schema::KernelArg& a) {
  switch (a.value_case()) {
    case schema::KernelArg::kBuffer:
      return "a buffer pointer";
    case schema::KernelArg::kSize:
      return "the size (int64)";
    case schema::KernelArg::kI64:
      return "an i64";
    case schema::KernelArg::kRealSizePtr:
      return "the real-size pointer (const int64*)";
    case schema::KernelArg::kKv:
      return "a KV-cache pointer";
    default:
      return "an f32";
  }
}

Status params_check(cudaKernel_t kernel, const std::string& symbol,
                    const schema::KernelStep& step) {
  const void* fn = reinterpret_cast<const void*>(kernel);
  const std::string where = "step '" + step.node() + "' and kernel '" + symbol + "'";
  for (int i = 0; i <= step.args_size(); ++i) {
    size_t offset = 0;
    size_t size = 0;
    cudaError_t err = cudaFuncGetParamInfo(fn, static_cast<size_t>(i), &offset, &size);
    if (i == step.args_size()) {
      if (err == cudaSuccess)
        return invalid_argument(where + ": the kernel takes more than the " +
                                std::to_string(step.args_size()) + " arguments the step passes");
      (void)cudaGetLastError();
      if (err != cudaErrorInvalidValue)
        return cuda_status(err, "cudaFuncGetParamInfo(" + where + ")");
      break;
    }
    if (err == cudaErrorInvalidValue) {
      (void)cudaGetLastError();
      return invalid_argument(where + ": the step passes " + std::to_string(step.args_size()) +
                              " arguments, the kernel takes " + std::to_string(i));
    }
    KILN_CUDA_TRY(err, "cudaFuncGetParamInfo(" + where + ", parameter " + std::to_string(i) + ")");
    const auto& arg = step.args(i);
    if (size != arg_bytes(arg))
      return invalid_argument(where + ": argument " + std::to_string(i) + " is " + arg_kind(arg) +
                              " (" + std::to_string(arg_bytes(arg)) +
                              " bytes) but the kernel parameter is " + std::to_string(size) +
                              " bytes");
  }
  return Status::ok_status();
}

struct KernelUse {
  bool used = false;
  uint32_t max_block = 0;
  uint32_t max_shared = 0;
  std::string node;  // a step that needs max_shared / max_block, for messages
};

}  // namespace

Status kernels_prepare(const ModelState& st) {
  const auto& m = st.manifest;
  std::vector<KernelUse> uses(st.kernels.size());
  for (const auto& piece : m.pieces()) {
    for (const auto& step : piece.steps()) {
      if (step.op_case() != schema::Step::kKernel) continue;
      const auto& k = step.kernel();
      struct Use {
        uint32_t index, block, shared;
      };
      std::vector<Use> indices = {{k.kernel(), k.block(), k.shared_bytes()}};
      for (const auto& [size, index] : k.specialised())
        indices.push_back({index, k.block(), k.shared_bytes()});
      for (const auto& t : k.tuned()) indices.push_back({t.kernel(), t.block(), t.shared_bytes()});
      for (const Use& u : indices) {
        KILN_RETURN_IF_ERROR(params_check(st.kernels[u.index], m.kernels(u.index).symbol(), k));
        KernelUse& use = uses[u.index];
        use.used = true;
        if (u.block > use.max_block || u.shared > use.max_shared) use.node = k.node();
        use.max_block = std::max(use.max_block, u.block);
        use.max_shared = std::max(use.max_shared, u.shared);
      }
    }
  }
  int optin = 0;
  KILN_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, st.device),
                "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  for (size_t i = 0; i < uses.size(); ++i) {
    if (!uses[i].used) continue;
    const std::string& symbol = m.kernels(static_cast<int>(i)).symbol();
    const void* fn = reinterpret_cast<const void*>(st.kernels[i]);
    cudaFuncAttributes attr{};
    KILN_CUDA_TRY(cudaFuncGetAttributes(&attr, fn),
                  "cudaFuncGetAttributes(kernel '" + symbol + "')");
    if (static_cast<int>(uses[i].max_block) > attr.maxThreadsPerBlock)
      return failed_precondition("kernel '" + symbol + "' allows at most " +
                                 std::to_string(attr.maxThreadsPerBlock) +
                                 " threads per block; step '" + uses[i].node + "' launches " +
                                 std::to_string(uses[i].max_block));
    const size_t total = uses[i].max_shared + attr.sharedSizeBytes;
    if (total > static_cast<size_t>(optin))
      return failed_precondition("kernel '" + symbol + "' needs " + std::to_string(total) +
                                 " bytes of shared memory (step '" + uses[i].node +
                                 "'), this GPU allows " + std::to_string(optin) + " per block");
    if (static_cast<int>(uses[i].max_shared) > attr.maxDynamicSharedSizeBytes)
      KILN_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(uses[i].max_shared)),
                    "cudaFuncSetAttribute(kernel '" + symbol + "', max dynamic shared " +
                        std::to_string(uses[i].max_shared) + " bytes)");
  }
  return Status::ok_status();
}

}  // namespace kiln::runtime
