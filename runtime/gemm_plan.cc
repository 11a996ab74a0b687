#include "runtime/gemm_plan.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "cache/dtype.h"
#include "runtime/cuda_check.h"
#include "runtime/dim_math.h"
#include "runtime/log.h"
#include "runtime/manifest_validate.h"
#include "runtime/size_gate.h"

namespace kiln::runtime {
namespace {

// The config attributes a recorded algorithm carries, in the types cuBLASLt reads and writes,
// and the table that names each one: shared by re-creating (set) and recording (get).
struct AlgoConfigValues {
  int32_t split_k = 1;
  uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0, custom = 0;
  uint16_t inner = 0, cluster = 0;
};
struct AlgoConfigField {
  cublasLtMatmulAlgoConfigAttributes_t attr;
  void* value;
  size_t bytes;
  const char* name;
};
std::array<AlgoConfigField, 8> algo_config_fields(AlgoConfigValues& v) {
  return {{
      {CUBLASLT_ALGO_CONFIG_TILE_ID, &v.tile, sizeof(v.tile), "tile"},
      {CUBLASLT_ALGO_CONFIG_STAGES_ID, &v.stages, sizeof(v.stages), "stages"},
      {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v.split_k, sizeof(v.split_k), "split_k"},
      {CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &v.reduction, sizeof(v.reduction),
       "reduction_scheme"},
      {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &v.swizzle, sizeof(v.swizzle), "cta_swizzle"},
      {CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, &v.custom, sizeof(v.custom), "custom_option"},
      {CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, &v.inner, sizeof(v.inner), "inner_shape"},
      {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &v.cluster, sizeof(v.cluster), "cluster_shape"},
  }};
}

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
    case schema::GEMM_EPILOGUE_GELU:
      return CUBLASLT_EPILOGUE_GELU;
    case schema::GEMM_EPILOGUE_BIAS_GELU:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
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

constexpr uint32_t kAllowedReductionSchemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;

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
  plan->compute_ = g.compute();
  const int64_t M = plan->m_, N = plan->n_, K = plan->k_, batch = plan->batch_;
  plan->stride_a_ = *dim_eval(g.stride_a(), p);
  plan->stride_b_ = *dim_eval(g.stride_b(), p);
  plan->stride_d_ = *dim_eval(g.stride_d(), p);
  const ComputeTypes types = compute_types(g.compute());
  plan->elem_bytes_ = static_cast<int64_t>(
      dtype_size(static_cast<DType>(st.manifest.buffers(static_cast<int>(g.d())).dtype())));
  const std::string what = plan->describe() + " at size " + std::to_string(p);

  plan->ptr_a_ = st.buffer_ptr(arena, g.b());
  plan->ptr_b_ = st.buffer_ptr(arena, g.a());
  plan->ptr_d_ = st.buffer_ptr(arena, g.d());
  plan->ptr_c_ = g.has_c() ? st.buffer_ptr(arena, g.c()) : plan->ptr_d_;
  plan->beta_ = g.has_c() ? g.beta() : 0.0f;

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
    // The bias has the data dtype (validated), whatever cuBLASLt's default for it.
    const cudaDataType_t bias_type = types.storage;
    KILN_CUBLAS_TRY(cublasLtMatmulDescSetAttribute(plan->desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                   &bias_type, sizeof(bias_type)),
                    "setting the bias data type for " + what);
  }

  // cuBLAS's A = op(B)^T source: row-major B is [K,N] (or [N,K] when trans_b).
  const int64_t a_rows = g.trans_b() ? K : N, a_cols = g.trans_b() ? N : K;
  // cuBLAS's B = op(A)^T source: row-major A is [M,K] (or [K,M] when trans_a).
  const int64_t b_rows = g.trans_a() ? M : K, b_cols = g.trans_a() ? K : M;
  KILN_RETURN_IF_ERROR(layout_make(&plan->lt_a_, types.storage, a_rows, a_cols, batch,
                                   plan->stride_b_, "B of " + what));
  KILN_RETURN_IF_ERROR(layout_make(&plan->lt_b_, types.storage, b_rows, b_cols, batch,
                                   plan->stride_a_, "A of " + what));
  KILN_RETURN_IF_ERROR(
      layout_make(&plan->lt_c_, types.storage, N, M, batch, plan->stride_d_, "C of " + what));
  KILN_RETURN_IF_ERROR(
      layout_make(&plan->lt_d_, types.storage, N, M, batch, plan->stride_d_, "D of " + what));

  if (known != nullptr && known->chosen) {
    plan->algo_ = known->algo;
    plan->algo_source_ = "load";
    return plan;
  }
  for (const schema::GemmAlgo& rec : g.algos()) {
    if (rec.size() != p) continue;
    auto algo = plan->algo_recreate(st.lt, rec, workspace_bytes);
    if (algo.ok()) {
      plan->algo_ = *algo;
      plan->algo_source_ = "recorded";
      return plan;
    }
    log_warning("the recorded algorithm for " + what + " (" + rec.source() +
                ") cannot be used, falling back to the heuristic: " + algo.status().message());
    break;
  }
  KILN_ASSIGN_OR_RETURN(auto results, plan->heuristic(st.lt, workspace_bytes, 1));
  plan->algo_ = results[0].algo;
  plan->algo_source_ = "heuristic";
  return plan;
}

Result<std::vector<cublasLtMatmulHeuristicResult_t>> GemmPlan::heuristic(cublasLtHandle_t lt,
                                                                         size_t workspace_bytes,
                                                                         int count) const {
  const ComputeTypes types = compute_types(compute_);
  const std::string what = describe();
  PreferenceGuard pref;
  KILN_CUBLAS_TRY(cublasLtMatmulPreferenceCreate(&pref.pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t max_ws = workspace_bytes;
  KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(
                      pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof(max_ws)),
                  "setting the workspace limit for " + what);
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment_a()},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment_b()},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment_c()},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment_d()}};
  for (const auto& [attr, value] : aligns)
    KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.pref, attr, &value, sizeof(value)),
                    "setting operand alignment for " + what);
  // Split-K partial sums must be reduced in the fp32 compute type, in a fixed order: reducing in
  // the output type (16-bit) loses the fp32 accumulation the precision contract promises (seen
  // on the H100: bf16 errors of 0.04 at M = 3), and in-place reduction uses atomics, so two runs
  // would differ in the last bits.
  const uint32_t reduction_mask = kAllowedReductionSchemes;
  KILN_CUBLAS_TRY(cublasLtMatmulPreferenceSetAttribute(pref.pref,
                                                       CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                       &reduction_mask, sizeof(reduction_mask)),
                  "restricting split-K reduction schemes for " + what);

  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(count, 1)));
  int returned = 0;
  KILN_CUBLAS_TRY(
      cublasLtMatmulAlgoGetHeuristic(lt, desc_, lt_a_, lt_b_, lt_c_, lt_d_, pref.pref,
                                     static_cast<int>(results.size()), results.data(), &returned),
      "cublasLtMatmulAlgoGetHeuristic for " + what + ", compute " + types.name);
  std::vector<cublasLtMatmulHeuristicResult_t> usable;
  for (int i = 0; i < returned; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= workspace_bytes)
      usable.push_back(results[i]);
  if (usable.empty())
    return failed_precondition("no cuBLASLt algorithm for " + what + ", compute " + types.name +
                               " within " + std::to_string(workspace_bytes) +
                               " bytes of workspace");
  return usable;
}

Result<cublasLtMatmulAlgo_t> GemmPlan::algo_recreate(cublasLtHandle_t lt,
                                                     const schema::GemmAlgo& rec,
                                                     size_t workspace_bytes) const {
  const ComputeTypes types = compute_types(compute_);
  cublasLtMatmulAlgo_t algo{};
  cublasStatus_t s =
      cublasLtMatmulAlgoInit(lt, types.compute, CUDA_R_32F, types.storage, types.storage,
                             types.storage, types.storage, rec.algo_id(), &algo);
  if (s != CUBLAS_STATUS_SUCCESS)
    return cublas_status(s, "cublasLtMatmulAlgoInit for algo id " + std::to_string(rec.algo_id()));
  if (rec.inner_shape() > UINT16_MAX || rec.cluster_shape() > UINT16_MAX ||
      rec.split_k() > INT32_MAX)
    return invalid_argument("recorded config value out of range");
  AlgoConfigValues v;
  v.tile = rec.tile();
  v.stages = rec.stages();
  v.split_k = static_cast<int32_t>(std::max<uint32_t>(rec.split_k(), 1));
  v.reduction = rec.reduction_scheme();
  v.swizzle = rec.cta_swizzle();
  v.custom = rec.custom_option();
  v.inner = static_cast<uint16_t>(rec.inner_shape());
  v.cluster = static_cast<uint16_t>(rec.cluster_shape());
  if (v.split_k > 1 && (v.reduction & ~kAllowedReductionSchemes) != 0)
    return invalid_argument("recorded split-K reduction scheme " + std::to_string(v.reduction) +
                            " does not reduce in fp32 in a fixed order");
  for (const auto& c : algo_config_fields(v)) {
    s = cublasLtMatmulAlgoConfigSetAttribute(&algo, c.attr, c.value, c.bytes);
    if (s != CUBLAS_STATUS_SUCCESS)
      return cublas_status(s, std::string("setting the recorded ") + c.name);
  }
  cublasLtMatmulHeuristicResult_t check{};
  s = cublasLtMatmulAlgoCheck(lt, desc_, lt_a_, lt_b_, lt_c_, lt_d_, &algo, &check);
  if (s != CUBLAS_STATUS_SUCCESS || check.state != CUBLAS_STATUS_SUCCESS)
    return cublas_status(s != CUBLAS_STATUS_SUCCESS ? s : check.state, "cublasLtMatmulAlgoCheck");
  if (check.workspaceSize > workspace_bytes)
    return failed_precondition("it needs " + std::to_string(check.workspaceSize) +
                               " bytes of workspace, " + std::to_string(workspace_bytes) +
                               " available");
  // cublasLtMatmulAlgoCheck does not see pointers: check the operand alignments it requires.
  const std::pair<cublasLtMatmulAlgoCapAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_A_BYTES, alignment_a()},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_B_BYTES, alignment_b()},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_C_BYTES, alignment_c()},
      {CUBLASLT_ALGO_CAP_MIN_ALIGNMENT_D_BYTES, alignment_d()}};
  for (const auto& [attr, have] : aligns) {
    uint32_t need = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, &need, sizeof(need), &written) ==
            CUBLAS_STATUS_SUCCESS &&
        written == sizeof(need) && need > have)
      return failed_precondition("it needs " + std::to_string(need) +
                                 "-byte aligned operands; this GEMM's are " + std::to_string(have) +
                                 "-byte aligned");
  }
  return algo;
}

uint32_t GemmPlan::alignment_a() const {
  return alignment_of(ptr_a_, batch_, stride_b_ * elem_bytes_);
}
uint32_t GemmPlan::alignment_b() const {
  return alignment_of(ptr_b_, batch_, stride_a_ * elem_bytes_);
}
uint32_t GemmPlan::alignment_c() const {
  return alignment_of(ptr_c_, batch_, stride_d_ * elem_bytes_);
}
uint32_t GemmPlan::alignment_d() const {
  return alignment_of(ptr_d_, batch_, stride_d_ * elem_bytes_);
}

Result<schema::GemmAlgo> gemm_algo_record(const cublasLtMatmulAlgo_t& algo) {
  schema::GemmAlgo rec;
  int32_t id = 0;
  size_t written = 0;
  KILN_CUBLAS_TRY(
      cublasLtMatmulAlgoConfigGetAttribute(&algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &written),
      "reading the algorithm's id");
  AlgoConfigValues v;
  for (const auto& c : algo_config_fields(v)) {
    KILN_CUBLAS_TRY(cublasLtMatmulAlgoConfigGetAttribute(&algo, c.attr, c.value, c.bytes, &written),
                    std::string("reading the algorithm's ") + c.name);
  }
  rec.set_algo_id(id);
  rec.set_tile(v.tile);
  rec.set_stages(v.stages);
  rec.set_split_k(static_cast<uint32_t>(std::max(v.split_k, 1)));
  rec.set_reduction_scheme(v.reduction);
  rec.set_cta_swizzle(v.swizzle);
  rec.set_custom_option(v.custom);
  rec.set_inner_shape(v.inner);
  rec.set_cluster_shape(v.cluster);
  return rec;
}

GemmPlan::~GemmPlan() {
  if (lt_d_ != nullptr) (void)cublasLtMatrixLayoutDestroy(lt_d_);
  if (lt_c_ != nullptr) (void)cublasLtMatrixLayoutDestroy(lt_c_);
  if (lt_b_ != nullptr) (void)cublasLtMatrixLayoutDestroy(lt_b_);
  if (lt_a_ != nullptr) (void)cublasLtMatrixLayoutDestroy(lt_a_);
  if (desc_ != nullptr) (void)cublasLtMatmulDescDestroy(desc_);
}

Status GemmPlan::run(cublasLtHandle_t lt, void* workspace, size_t workspace_bytes,
                     cudaStream_t stream) const {
  KILN_CUBLAS_TRY(cublasLtMatmul(lt, desc_, &alpha_, ptr_a_, lt_a_, ptr_b_, lt_b_, &beta_, ptr_c_,
                                 lt_c_, ptr_d_, lt_d_, &algo_, workspace, workspace_bytes, stream),
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
      if (step.op_case() == schema::Step::kGemm && !gemm_step_is_skinny_at(step.gemm(), p)) {
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
