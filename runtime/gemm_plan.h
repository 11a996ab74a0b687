// One cuBLASLt matmul of a GemmStep at one padded size: its descriptors, layouts, resolved
// device pointers and its algorithm. The algorithms of every capture and compile size are chosen
// once, at load (gemm_algos_prepare: the heuristic needs no device pointers — every buffer is
// 256-aligned, so the alignments it sees are those of any executor's arena); an executor's plans
// reuse them, so executors of one model run identical GEMMs. Plans are made before capture
// (capture sizes at executor creation, eager sizes on first use) and reused for every run.
//
// Row-major trick: the manifest's row-major D[M,N] = op(A) @ op(B) is computed as the
// column-major D^T[N,M] = op(B)^T @ op(A)^T, so cuBLAS's "A" is our B and its "B" is our A,
// each described as the column-major view of its row-major memory (rows and cols swapped,
// ld = row length). The bias then runs along D^T's rows (N), as CUBLASLT_EPILOGUE_BIAS expects.
// C (a residual) has D's layout and may be D itself; cuBLASLt computes
// act(alpha·AB + beta·C + bias).
//
// Recorded algorithms (GemmStep.algos, chosen by the compiler's autotuner) are re-created with
// cublasLtMatmulAlgoInit + the recorded config attributes and checked with
// cublasLtMatmulAlgoCheck; one that fails falls back to the heuristic with a logged reason.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/status.h"
#include "runtime/model_state.h"
#include "schemas/manifest.pb.h"

namespace kiln::runtime {

class GemmPlan {
 public:
  // `arena` is the executor's arena (at load, a stand-in: only the algorithm is wanted);
  // `workspace_bytes` the workspace every run will pass. `known`: an algorithm chosen at load
  // for this step and size; null or unchosen runs the heuristic.
  static Result<std::unique_ptr<GemmPlan>> create(const ModelState& st, const schema::GemmStep& g,
                                                  char* arena, int64_t p, size_t workspace_bytes,
                                                  const GemmAlgo* known = nullptr);
  ~GemmPlan();
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;

  Status run(cublasLtHandle_t lt, void* workspace, size_t workspace_bytes,
             cudaStream_t stream) const;
  std::string describe() const;  // "gemm 'node' (M=.., N=.., K=.., batch=..)"
  const cublasLtMatmulAlgo_t& algo() const { return algo_; }
  // Where the algorithm came from: "heuristic", "recorded" or "load" (chosen at load).
  const std::string& algo_source() const { return algo_source_; }

  // For the autotuner: up to `count` heuristic candidates for this plan, best first (the first
  // is what create() picks), each fitting in `workspace_bytes`.
  Result<std::vector<cublasLtMatmulHeuristicResult_t>> heuristic(cublasLtHandle_t lt,
                                                                 size_t workspace_bytes,
                                                                 int count) const;
  void set_algo(const cublasLtMatmulAlgo_t& algo) { algo_ = algo; }
  // Re-creates a recorded algorithm for this plan; an error says why it cannot be used here
  // (unknown id, config rejected by cublasLtMatmulAlgoCheck, too much workspace, alignment).
  Result<cublasLtMatmulAlgo_t> algo_recreate(cublasLtHandle_t lt, const schema::GemmAlgo& rec,
                                             size_t workspace_bytes) const;

 private:
  GemmPlan() = default;
  // Operand alignments in bytes (pointer and, for a batch, the byte stride).
  uint32_t alignment_a() const;
  uint32_t alignment_b() const;
  uint32_t alignment_c() const;
  uint32_t alignment_d() const;
  std::string node_;
  int64_t m_ = 0, n_ = 0, k_ = 0, batch_ = 1;
  float alpha_ = 1.0f;
  float beta_ = 0.0f;  // 0 without C
  int64_t stride_a_ = 0, stride_b_ = 0, stride_d_ = 0, elem_bytes_ = 4;
  schema::GemmCompute compute_ = schema::GEMM_COMPUTE_F32;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t lt_a_ = nullptr;  // cuBLAS's A: our B
  cublasLtMatrixLayout_t lt_b_ = nullptr;  // cuBLAS's B: our A
  cublasLtMatrixLayout_t lt_c_ = nullptr;  // C: D's layout (a separate object, same values)
  cublasLtMatrixLayout_t lt_d_ = nullptr;
  const void* ptr_a_ = nullptr;  // cuBLAS's A pointer: our B
  const void* ptr_b_ = nullptr;  // cuBLAS's B pointer: our A
  const void* ptr_c_ = nullptr;  // C, or D when there is none (beta = 0)
  void* ptr_d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  std::string algo_source_ = "heuristic";
};

// The config attributes of an algorithm, as the manifest records them (size, source and
// workspace_bytes left for the caller).
Result<schema::GemmAlgo> gemm_algo_record(const cublasLtMatmulAlgo_t& algo);

// The plans of every GEMM step at one size, by flat step index (null for kernel steps).
struct GemmPlanSet {
  std::vector<std::unique_ptr<GemmPlan>> by_step;
};

// Uses the algorithms chosen at load for size p when there are any.
Result<GemmPlanSet> gemm_plans_create(const ModelState& st, char* arena, int64_t p,
                                      size_t workspace_bytes);

// The GEMM workspace an executor allocates: the manifest's, at least 32 MiB.
size_t gemm_workspace_bytes(const schema::Manifest& m);

// Fills st.gemm_algos for every capture and compile size (st.lt and st.workspace_bytes set).
Status gemm_algos_prepare(ModelState& st);

}  // namespace kiln::runtime
