#include "compiler/autotune/gemm_autotune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "cache/dtype.h"
#include "compiler/autotune/graph_timer.h"
#include "compiler/autotune/operand_fill.h"
#include "runtime/cuda_check.h"
#include "runtime/dim_math.h"
#include "runtime/gemm_plan.h"
#include "runtime/model_state.h"

namespace kiln::compiler {
namespace {

struct DeviceBuffers {
  std::vector<void*> ptrs;
  ~DeviceBuffers() {
    for (void* p : ptrs) (void)cudaFree(p);
  }
};

// The step alone on a private arena: its operands as consecutive 256-aligned arena buffers.
struct MiniModel {
  std::unique_ptr<runtime::ModelState> state;
  schema::GemmStep step;
  uint64_t arena_bytes = 0;
  std::vector<std::pair<uint32_t, int64_t>> fills;  // (mini buffer, elements) to randomise
};

Result<MiniModel> mini_model(const schema::Manifest& m, const schema::GemmStep& g, int64_t p) {
  schema::Manifest mini;
  *mini.mutable_config() = m.config();
  MiniModel out;
  out.step = g;
  out.step.clear_algos();
  std::map<uint32_t, uint32_t> remap;
  auto place = [&](uint32_t index) -> Result<uint32_t> {
    auto it = remap.find(index);
    if (it != remap.end()) return it->second;
    if (index >= static_cast<uint32_t>(m.buffers_size()))
      return invalid_argument(fmt::format("gemm '{}': buffer {} out of range", g.node(), index));
    schema::Buffer b = m.buffers(static_cast<int>(index));
    auto n = runtime::dims_numel(b.dims(), p);
    if (!n) return invalid_argument(fmt::format("gemm '{}': buffer {} overflows", g.node(), index));
    const uint64_t bytes = static_cast<uint64_t>(*n) * dtype_size(static_cast<DType>(b.dtype()));
    b.set_location(schema::Buffer::LOCATION_ARENA);
    b.set_offset(out.arena_bytes);
    out.arena_bytes += (bytes + 255) / 256 * 256;
    const auto mi = static_cast<uint32_t>(mini.buffers_size());
    *mini.add_buffers() = b;
    remap[index] = mi;
    out.fills.emplace_back(mi, *n);
    return mi;
  };
  KILN_ASSIGN_OR_RETURN(uint32_t a, place(g.a()));
  KILN_ASSIGN_OR_RETURN(uint32_t b, place(g.b()));
  KILN_ASSIGN_OR_RETURN(uint32_t d, place(g.d()));
  out.step.set_a(a);
  out.step.set_b(b);
  out.step.set_d(d);
  if (g.has_c()) {
    KILN_ASSIGN_OR_RETURN(uint32_t c, place(g.c()));  // C aliasing D stays aliased
    out.step.set_c(c);
  }
  if (g.has_bias()) {
    KILN_ASSIGN_OR_RETURN(uint32_t bias, place(g.bias()));
    out.step.set_bias(bias);
  }
  out.arena_bytes = std::max<uint64_t>(out.arena_bytes, 256);
  *mini.add_pieces()->add_steps()->mutable_gemm() = out.step;
  out.state = runtime::model_state_create(std::move(mini), {});
  return out;
}

}  // namespace

Result<std::unique_ptr<GemmTuner>> GemmTuner::create(const schema::Manifest& m) {
  std::unique_ptr<GemmTuner> t(new GemmTuner());
  t->m_ = &m;
  if (cublasLtCreate(&t->lt_) != CUBLAS_STATUS_SUCCESS)
    return internal_error("autotune: cublasLtCreate failed");
  KILN_CUDA_TRY(cudaStreamCreateWithFlags(&t->stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  t->workspace_bytes_ = runtime::gemm_workspace_bytes(m);
  KILN_CUDA_TRY(cudaMalloc(&t->workspace_, t->workspace_bytes_), "workspace");
  return t;
}

GemmTuner::~GemmTuner() {
  if (workspace_ != nullptr) (void)cudaFree(workspace_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  if (lt_ != nullptr) (void)cublasLtDestroy(lt_);
}

Result<GemmTiming> GemmTuner::tune(const schema::GemmStep& g, int64_t p, int candidates) {
  KILN_ASSIGN_OR_RETURN(MiniModel mm, mini_model(*m_, g, p));
  mm.state->lt = lt_;
  const int sets = static_cast<int>(std::clamp<uint64_t>(kMaxOperandSetBytes / mm.arena_bytes, 1,
                                                         static_cast<uint64_t>(kOperandSets)));

  DeviceBuffers arenas;
  std::mt19937 rng(static_cast<uint32_t>(p * 7919 + g.node().size()));
  std::vector<std::unique_ptr<runtime::GemmPlan>> plans;
  for (int s = 0; s < sets; ++s) {
    void* arena = nullptr;
    KILN_CUDA_TRY(cudaMalloc(&arena, mm.arena_bytes), "arena for " + g.node());
    arenas.ptrs.push_back(arena);
    for (const auto& [index, count] : mm.fills) {
      const auto& b = mm.state->manifest.buffers(static_cast<int>(index));
      const auto bytes = autotune_random_bytes(static_cast<DType>(b.dtype()), count, rng);
      KILN_CUDA_TRY(cudaMemcpy(static_cast<char*>(arena) + b.offset(), bytes.data(), bytes.size(),
                               cudaMemcpyHostToDevice),
                    "filling operands");
    }
    KILN_ASSIGN_OR_RETURN(
        auto plan, runtime::GemmPlan::create(*mm.state, mm.step, static_cast<char*>(arena), p,
                                             workspace_bytes_));
    plans.push_back(std::move(plan));
  }
  KILN_ASSIGN_OR_RETURN(auto cands, plans[0]->heuristic(lt_, workspace_bytes_, candidates));

  auto run_all = [&](int calls) -> Status {
    for (int c = 0; c < calls; ++c)
      KILN_RETURN_IF_ERROR(plans[c % sets]->run(lt_, workspace_, workspace_bytes_, stream_));
    return Status::ok_status();
  };
  auto time_candidate = [&](const cublasLtMatmulAlgo_t& algo) -> Result<double> {
    for (auto& plan : plans) plan->set_algo(algo);
    return graph_median_ms(stream_, sets, run_all);
  };

  GemmTiming out;
  int best = -1;
  double best_ms = 0;
  for (size_t i = 0; i < cands.size(); ++i) {
    auto t = time_candidate(cands[i].algo);
    if (!t.ok()) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaGetLastError();
      if (i == 0) return t.status();  // the default itself must run
      continue;
    }
    ++out.candidates;
    if (i == 0) {
      out.heuristic_ms = *t;
      best = 0;
      best_ms = *t;
    } else if (*t < best_ms && *t < 0.99 * out.heuristic_ms) {
      best = static_cast<int>(i);
      best_ms = *t;
    }
  }
  KILN_ASSIGN_OR_RETURN(out.algo, runtime::gemm_algo_record(cands[static_cast<size_t>(best)].algo));
  out.algo.set_size(static_cast<uint32_t>(p));
  out.algo.set_source("autotune");
  out.algo.set_workspace_bytes(cands[static_cast<size_t>(best)].workspaceSize);
  out.ms = best_ms;
  out.improved = best != 0;
  return out;
}

}  // namespace kiln::compiler
