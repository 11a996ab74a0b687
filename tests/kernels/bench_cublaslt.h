// cuBLASLt as the kernel benchmarks call it (tests/kernels/bench_skinny_gemm.cc,
// bench_tiled_gemm.cc): the product D [m, n] = A [m, k] · W [n, k]^T of row-major fp16 matrices
// with fp32 sums, split-K partial sums reduced in fp32 as the runtime asks
// (runtime/gemm_plan.cc), optionally with cuBLASLt's bias epilogue.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <cstdio>

namespace kiln::bench {

// True on CUBLAS_STATUS_SUCCESS; else "<who>: <what>: cuBLAS status N" on stderr and false.
inline bool lt_ok(const char* who, cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  std::fprintf(stderr, "%s: %s: cuBLAS status %d\n", who, what, static_cast<int>(s));
  return false;
}

// The descriptors of one product; call it as
//   cublasLtMatmul(lt, p.desc, &alpha, W, p.w, A, p.a, &beta, D, p.d, D, p.d, &algo, ws,
//                  LtProduct::kWorkspaceBytes, stream)
struct LtProduct {
  static constexpr uint64_t kWorkspaceBytes = uint64_t{32} << 20;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;

  LtProduct() = default;
  LtProduct(const LtProduct&) = delete;
  LtProduct& operator=(const LtProduct&) = delete;
  ~LtProduct() {
    if (pref != nullptr) cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {d, a, w})
      if (l != nullptr) cublasLtMatrixLayoutDestroy(l);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }

  // Describes the product; `bias` (a device pointer to n fp16 values) adds the bias epilogue.
  // False, with the failing call on stderr, when cuBLASLt refuses a step.
  bool init(const char* who, int64_t m, int64_t n, int64_t k, const void* bias = nullptr) {
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    const uint64_t ws_bytes = kWorkspaceBytes;
    const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    // Column-major: D^T [n, m] = W [k, n]^T · A^T [k, m].
    return lt_ok(who, cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                 "cublasLtMatmulDescCreate") &&
           lt_ok(who,
                 cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t,
                                                sizeof(op_t)),
                 "transa") &&
           lt_ok(who,
                 cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n,
                                                sizeof(op_n)),
                 "transb") &&
           (bias == nullptr ||
            (lt_ok(who,
                   cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                  sizeof(epilogue)),
                   "epilogue") &&
             lt_ok(who,
                   cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof(bias)),
                   "bias pointer"))) &&
           lt_ok(who, cublasLtMatrixLayoutCreate(&w, CUDA_R_16F, k, n, k), "layout W") &&
           lt_ok(who, cublasLtMatrixLayoutCreate(&a, CUDA_R_16F, k, m, k), "layout A") &&
           lt_ok(who, cublasLtMatrixLayoutCreate(&d, CUDA_R_16F, n, m, n), "layout D") &&
           lt_ok(who, cublasLtMatmulPreferenceCreate(&pref), "preference") &&
           lt_ok(who,
                 cublasLtMatmulPreferenceSetAttribute(
                     pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)),
                 "workspace limit") &&
           lt_ok(
               who,
               cublasLtMatmulPreferenceSetAttribute(
                   pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction, sizeof(reduction)),
               "reduction schemes");
  }
};

}  // namespace kiln::bench
