#include "compiler/autotune/autotune.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <vector>

#include "compiler/autotune/gemm_autotune.h"
#include "compiler/autotune/tuning_db.h"
#include "compiler/log.h"
#include "runtime/dim_math.h"

namespace kiln::compiler {
namespace {

std::string compute_name(schema::GemmCompute c) {
  switch (c) {
    case schema::GEMM_COMPUTE_F32:
      return "F32";
    case schema::GEMM_COMPUTE_TF32:
      return "TF32";
    case schema::GEMM_COMPUTE_F16:
      return "F16";
    case schema::GEMM_COMPUTE_BF16:
      return "BF16";
    default:
      return "UNSPECIFIED";
  }
}

std::string epilogue_name(schema::GemmEpilogue e) {
  std::string s = schema::GemmEpilogue_Name(e);
  const std::string prefix = "GEMM_EPILOGUE_";
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

Result<TuningKey> key_of(const schema::GemmStep& g, int64_t p, const std::string& arch,
                         int64_t version) {
  TuningKey k;
  k.arch = arch;
  k.cublaslt_version = version;
  k.compute = compute_name(g.compute());
  k.epilogue = epilogue_name(g.epilogue());
  k.trans_a = g.trans_a();
  k.trans_b = g.trans_b();
  k.has_c = g.has_c();
  auto m = runtime::dim_eval(g.m(), p), n = runtime::dim_eval(g.n(), p),
       kk = runtime::dim_eval(g.k(), p), batch = runtime::dim_eval(g.batch(), p);
  if (!m || !n || !kk || !batch)
    return invalid_argument(
        fmt::format("autotune: gemm '{}' dims overflow at size {}", g.node(), p));
  k.m = *m;
  k.n = *n;
  k.k = *kk;
  k.batch = std::max<int64_t>(*batch, 1);
  if (k.batch > 1) {  // strides matter only with a batch
    k.stride_a = runtime::dim_eval(g.stride_a(), p).value_or(0);
    k.stride_b = runtime::dim_eval(g.stride_b(), p).value_or(0);
    k.stride_d = runtime::dim_eval(g.stride_d(), p).value_or(0);
  }
  return k;
}

void set_algo(schema::GemmStep& g, schema::GemmAlgo algo) {
  for (auto& a : *g.mutable_algos())
    if (a.size() == algo.size()) {
      a = std::move(algo);
      return;
    }
  *g.add_algos() = std::move(algo);
}

}  // namespace

Status autotune_gemms(const AutotuneOptions& options, schema::Manifest& m, AutotuneReport* report) {
  AutotuneReport local;
  AutotuneReport& rep = report != nullptr ? *report : local;
  rep = AutotuneReport{};
  if (options.mode == AutotuneMode::kOff) {
    rep.skipped = "autotune is off";
    return Status::ok_status();
  }
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  std::set<int64_t> size_set;
  for (uint32_t s : m.config().compile_sizes()) size_set.insert(s);
  for (uint32_t s : m.config().cudagraph_capture_sizes()) size_set.insert(s);
  std::vector<schema::GemmStep*> steps;
  for (auto& piece : *m.mutable_pieces())
    for (auto& step : *piece.mutable_steps())
      if (step.op_case() == schema::Step::kGemm) steps.push_back(step.mutable_gemm());
  if (steps.empty() || size_set.empty()) {
    rep.skipped = steps.empty() ? "no GEMM steps" : "no compile or capture sizes to tune for";
    return Status::ok_status();
  }
  // Algorithms are per arch: with several targets one recorded choice would be wrong (and
  // logged as a fallback) on the others.
  if (m.config().targets_size() != 1) {
    rep.skipped =
        fmt::format("{} target archs; tuned algorithms are per arch", m.config().targets_size());
    if (options.mode == AutotuneMode::kOn)
      return failed_precondition("autotune: " + rep.skipped);
    return Status::ok_status();
  }
  const std::string arch = m.config().targets(0);

  TuningDb db;
  if (!options.tuning_db.empty()) {
    KILN_ASSIGN_OR_RETURN(db, TuningDb::load(options.tuning_db));
  }
  const size_t db_size_before = db.size();
  const auto version = static_cast<int64_t>(cublasLtGetVersion());

  // The GPU: present and of the target arch, or timing is skipped (database hits still apply).
  std::unique_ptr<GemmTuner> tuner;
  auto device_arch = gemm_tune_device_arch();
  if (!device_arch.ok()) {
    rep.skipped = device_arch.status().message();
  } else if (*device_arch != arch) {
    rep.skipped = fmt::format("the GPU is {}, the target {}", *device_arch, arch);
  } else {
    KILN_ASSIGN_OR_RETURN(tuner, GemmTuner::create(m));
  }
  if (tuner == nullptr && options.mode == AutotuneMode::kOn)
    return failed_precondition("autotune: on, but cannot time GEMMs: " + rep.skipped);

  const int total = static_cast<int>(steps.size() * size_set.size());
  int index = 0;
  bool budget_noted = false;
  std::set<std::string> tuned_now;  // keys timed in this run (repeats reuse them)
  for (schema::GemmStep* g : steps) {
    for (int64_t p : size_set) {
      ++index;
      ++rep.gemms;
      KILN_ASSIGN_OR_RETURN(TuningKey key, key_of(*g, p, arch, version));
      if (const TuningEntry* hit = db.find(key)) {
        schema::GemmAlgo algo = hit->algo;
        algo.set_size(static_cast<uint32_t>(p));
        algo.set_source(tuned_now.count(key.to_string()) ? "autotune" : "tuning-db");
        set_algo(*g, std::move(algo));
        ++rep.from_db;
        continue;
      }
      if (tuner == nullptr) continue;
      if (elapsed() > options.budget_s) {
        ++rep.over_budget;
        if (!budget_noted)
          logger().info(
              "kiln: autotune budget of {:.0f} s spent; the remaining GEMMs keep the heuristic",
              options.budget_s);
        budget_noted = true;
        continue;
      }
      KILN_ASSIGN_OR_RETURN(GemmTiming t, tuner->tune(*g, p, options.candidates));
      ++rep.timed;
      rep.improved += t.improved ? 1 : 0;
      logger().info(
          "tuning gemm {}/{} '{}' m={} n={} k={} batch={} (size {}): {} candidates, best {:.4f} "
          "ms (heuristic {:.4f} ms)",
          index, total, g->node(), key.m, key.n, key.k, key.batch, p, t.candidates, t.ms,
          t.heuristic_ms);
      TuningEntry entry;
      entry.algo = t.algo;
      entry.algo.clear_size();
      entry.algo.clear_source();
      entry.ms = t.ms;
      entry.heuristic_ms = t.heuristic_ms;
      db.put(key, entry);
      tuned_now.insert(key.to_string());
      set_algo(*g, t.algo);
    }
  }
  rep.seconds = elapsed();
  if (!options.tuning_db.empty() && db.size() != db_size_before)
    KILN_RETURN_IF_ERROR(db.save(options.tuning_db));
  return Status::ok_status();
}

}  // namespace kiln::compiler
