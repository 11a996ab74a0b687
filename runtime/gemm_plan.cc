#include "runtime/gemm_plan.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "cache/dtype.h"
#include "runtime/cuda_check.h"
#include "runtime/dim_math.h"
#include "runtime/manifest_validate.h"

namespace kiln::runtime {
namespace {

struct ComputeTypes {
  cublasComputeType_t compute;
  cudaDataType_t storage;
  const char* name;
};

ComputeTypes compute_types(schema::GemmCompute c) {
  switch (c) {
    case schema::GEMM_COMPUTE_TF32:
      return {CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F, "TF32"};
    case schema::GEMM_COMPUTE_F16:
      return {CUBLAS_COMPUTE_32F, CUDA_R_16F, "F16"};
    case schema::GEMM_COMPUTE_BF16:
      return {CUBLAS_COMPUTE_32F, CUDA_R_16BF, "BF16"};
    default:
      return {CUBLAS_COMPUTE_32F, CUDA_R_32F, "F32"};
  }
}

cublasLtEpilogue_t epilogue_of(schema::GemmEpilogue e) {
  switch (e) {
    case schema::GEMM_EPILOGUE_BIAS:
      return CUBLASLT_EPILOGUE_BIAS;
    case schema::GEMM_EPILOGUE_RELU:
      return CUBLASLT_EPILOGUE_RELU;
    case schema::GEMM_EPILOGUE_BIAS_RELU:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    default:
      return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

// The largest power of two (<= 256) dividing the pointer and, for a batch, the byte stride.
uint32_t alignment_of(const void* ptr, int64_t batch, int64_t stride_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(ptr);
  if (batch > 1) bits |= static_cast<uint64_t>(stride_bytes);
  uint32_t a = 256;
  while (a > 1 && bits % a != 0) a /= 2;
  return a;
}

struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref != nullptr) (void)cublasLtMatmulPreferenceDestroy(pref);
  }
};

Status layout_make(cublasLtMatrixLayout_t* out, cudaDataType_t type, int64_t rows, int64_t cols,
                   int64_t batch, int64_t stride, const std::string& what) {
  KILN_CUBLAS_TRY(cublasLtMatrixLayoutCreate(out, type, static_cast<uint64_t>(rows),
                                             static_cast<uint64_t>(cols), rows),
                  "cublasLtMatrixLayoutCreate for " + what);
  if (batch <= 1) return Status::ok_status();
  const int32_t count = static_cast<int32_t>(batch);
  KILN_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                   sizeof(count)),
                  "setting the batch count of " + what);
  KILN_CUBLAS_TRY(cublasLtMatrixLayoutSetAttribute(
                      *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
                  "setting the batch stride of " + what);
  return Status::ok_status();
}

}  // namespace

std::string GemmPlan::describe() const {
  return "gemm '" + node_ + "' (M=" + std::to_string(m_) + ", N=" + std::to_string(n_) +
         ", K=" + std::to_string(k_) + ", batch=" + std::to_string(batch_) + ")";
}

Result<std::unique_ptr<GemmPlan>> GemmPlan::create(const ModelState& st, const schema::GemmStep& g,
                                                   char* arena, int64_t p, size_t workspace_bytes,
                                                   const GemmAlgo* known) {
  KILN_RETURN_IF_ERROR(gemm_step_check_at(st.manifest, g, p));  // also every size not validated
  std::unique_ptr<GemmPlan> plan(new GemmPlan());
  plan->node_ = g.node();
  plan->m_ = *dim_eval(g.m(), p);
  plan->n_ = *dim_eval(g.n(), p);
  plan->k_ = *dim_eval(g.k(), p);
  plan->batch_ = *dim_eval(g.batch(), p);
  plan->alpha_ = g.alpha();
  const int64_t M = plan->m_, N = plan->n_, K = plan->k_, batch = plan->batch_;
  const int64_t stride_a = *dim_eval(g.stride_a(), p), stride_b = *dim_eval(g.stride_b(), p),
                stride_d = *dim_eval(g.stride_d(), p);
  const ComputeTypes types = compute_types(g.compute());
  const auto es = static_cast<int64_t>(
      dtype_size(static_cast<DType>(st.manifest.buffers(static_cast<int>(g.d())).dtype())));
  const std::string what = plan->describe() + " at size " + std::to_string(p);

  plan->ptr_a_ = st.buffer_ptr(arena, g.b());
  plan->ptr_b_ = st.buffer_ptr(arena, g.a());
  plan->ptr_d_ = st.buffer_ptr(arena, g.d());

  KILN_CUBLAS_TRY(cublasLtMatmulDescCreate(&plan->desc_, types.compute, CUDA_R_32F),
                  "cublasLtMatmulDescCreate for " + what);
  const cublasOperation_t op_a = g.trans_b() ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a() ? CUBLAS_OP_T : CUBLAS_OP_N;
  KILN_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
      "setting TRANSA for " + what);
  KILN_CUBLAS_TRY(
      cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
      "setting TRANSB for " + what);
  const cublasLtEpilogue_t epilogue = epilogue_of(g.epilogue());
  KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                 &epilogue, sizeof(epilogue)),
                  "setting the epilogue for " + what);
  if (g.has_bias()) {
    const void* bias = st.buffer_ptr(arena, g.bias());
    KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                   &bias, sizeof(bias)),
                    "setting the bias pointer for " + what);
  }

  // cuBLAS's A = op(B)^T source: row-major B is [K,N] (or [N,K] when trans_b).
  const int64_t a_rows = g.trans_b() ? K : N, a_cols = g.trans_b() ? N : K;
  // cuBLAS's B = op(A)^T source: row-major A is [M,K] (or [K,M] when trans_a).
  const int64_t b_rows = g.trans_a() ? M : K, b_cols = g.trans_a() ? K : M;
  KILN_RETURN_IF_ERROR(
      layout_make(&plan->lt_a_, types.storage, a_rows, a_cols, batch, stride_b, "B of " + what));
  KILN_RETURN_IF_ERROR(
      layout_make(&plan->lt_b_, types.storage, b_rows, b_cols, batch, stride_a, "A of " + what));
  KILN_RETURN_IF_ERROR(
      layout_make(&plan->lt_d_, types.storage, N, M, batch, stride_d, "D of " + what));

  if (known != nullptr && known->chosen) {
    plan->algo_ = known->algo;
    return plan;
  }
  PreferenceGuard pref;
  KILN_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref.pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t max_ws = workspace_bytes;
  KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
                      pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)),
                  "setting the workspace limit for " + what);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
       alignment_of(plan->ptr_a_, batch, stride_b * es)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
       alignment_of(plan->ptr_b_, batch, stride_a * es)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
       alignment_of(plan->ptr_d_, batch, stride_d * es)},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
       alignment_of(plan->ptr_d_, batch, stride_d * es)}};
  for (const auto& [attr, value] : aligns)
    KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.pref, attr, &value, sizeof(value)),
                    "setting operand alignment for " + what);

  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  KILN_CUBLAS_TRY(
      cublasLtMatmulAlgoGetHeuristic(st.lt, plan->desc_, plan->lt_a_, plan->lt_b_, plan->lt_d_,
                                     plan->lt_d_, pref.pref, 1, &result, &returned),
      "cublasLtMatmulAlgoGetHeuristic for " + what + ", compute " + types.name);
  if (returned < 1 || result.state != CUBLAS_STATUS_SUCCESS)
    return failed_precondition("no cuBLASLt algorithm for " + what + ", compute " + types.name);
  if (result.workspaceSize > workspace_bytes)
    return internal_error("cuBLASLt algorithm for " + what + " wants " +
                          std::to_string(result.workspaceSize) + " bytes of workspace, " +
                          std::to_string(workspace_bytes) + " available");
  plan->algo_ = result.algo;
  return plan;
}

GemmPlan::~GemmPlan() {
  if (lt_d_ != nullptr) (void)cublasLtMatrixLayoutDestroy(lt_d_);
  if (lt_b_ != nullptr) (void)cublasLtMatrixLayoutDestroy(lt_b_);
  if (lt_a_ != nullptr) (void)cublasLtMatrixLayoutDestroy(lt_a_);
  if (desc_ != nullptr) (void)cublasLtMatmulDescDestroy(desc_);
}

Status GemmPlan::run(cublasLtHandle_t lt, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) const {
  KILN_CUBLAS_TRY(cublasLtMatmul(lt, desc_, &alpha_, ptr_a_, lt_a_, ptr_b_, lt_b_, &beta_, ptr_d_,
                                 lt_d_, ptr_d_, lt_d_, &algo_, workspace, workspace_bytes, stream),
                  "cublasLtMatmul for " + describe());
  return Status::ok_status();
}

Result<GemmPlanSet> gemm_plans_create(const ModelState& st, char* arena, int64_t p,
                                      size_t workspace_bytes) {
  GemmPlanSet set;
  set.by_step.resize(st.step_count());
  auto chosen = st.gemm_algos.find(p);
  const std::vector<GemmAlgo>* algos = chosen == st.gemm_algos.end() ? nullptr : &chosen->second;
  size_t flat = 0;
  for (const auto& piece : st.manifest.pieces()) {
    for (const auto& step : piece.steps()) {
      if (step.op_case() == schema::Step::kGemm) {
        const GemmAlgo* known =
            algos != nullptr && flat < algos->size() ? &(*algos)[flat] : nullptr;
        KILN_ASSIGN_OR_RETURN(set.by_step[flat],
                              GemmPlan::create(st, step.gemm(), arena, p, workspace_bytes, known));
      }
      ++flat;
    }
  }
  return set;
}

size_t gemm_workspace_bytes(const schema::Manifest& m) {
  constexpr uint64_t kMinWorkspaceBytes = uint64_t{32} << 20;
  return static_cast<size_t>(std::max<uint64_t>(m.gemm_workspace_bytes(), kMinWorkspaceBytes));
}

Status gemm_algos_prepare(ModelState& st) {
  // The heuristic looks at operand alignments, never at the memory: a 256-aligned stand-in for
  // the arena gives exactly the alignments every real arena (cudaMalloc, >= 256-aligned) will
  // have. It is never dereferenced; the plans made with it are dropped, their algorithms kept.
  char* const arena_stand_in = reinterpret_cast<char*>(uintptr_t{1} << 30);
  std::vector<int64_t> sizes;
  for (uint32_t s : st.manifest.config().cudagraph_capture_sizes()) sizes.push_back(s);
  for (uint32_t s : st.manifest.config().compile_sizes()) sizes.push_back(s);
  for (int64_t p : sizes) {
    if (st.gemm_algos.count(p) != 0) continue;
    KILN_ASSIGN_OR_RETURN(GemmPlanSet set,
                          gemm_plans_create(st, arena_stand_in, p, st.workspace_bytes));
    std::vector<GemmAlgo> algos(set.by_step.size());
    for (size_t i = 0; i < set.by_step.size(); ++i)
      if (set.by_step[i] != nullptr) algos[i] = GemmAlgo{true, set.by_step[i]->algo()};
    st.gemm_algos.emplace(p, std::move(algos));
  }
  return Status::ok_status();
}

}  // namespace kiln::runtime
