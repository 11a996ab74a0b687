#include "compiler/autotune/autotune.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "compiler/autotune/gemm_autotune.h"
#include "compiler/autotune/tune_session.h"
#include "compiler/autotune/tuning_db.h"
#include "compiler/log.h"
#include "compiler/progress.h"
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

// A GEMM step of a manifest, the gated skinny-kernel step before it, and the steps that run
// only where cuBLASLt computes the GEMM, which the skinny kernel does itself: the norm before it
// (before_cublaslt, the kernel's prologue) and the gating after it (after_cublaslt, its
// epilogue); null when none.
struct GemmSite {
  schema::GemmStep* gemm = nullptr;
  schema::KernelStep* skinny = nullptr;
  const schema::KernelStep* norm = nullptr;
  const schema::KernelStep* gating = nullptr;
};

// Every GEMM step of `m`, in order.
std::vector<GemmSite> gemm_steps(schema::Manifest& m) {
  std::vector<GemmSite> steps;
  for (auto& piece : *m.mutable_pieces())
    for (int i = 0; i < piece.steps_size(); ++i) {
      schema::Step& step = *piece.mutable_steps(i);
      if (step.op_case() != schema::Step::kGemm) continue;
      schema::KernelStep* gate = nullptr;
      if (i > 0 && piece.steps(i - 1).has_kernel() && piece.steps(i - 1).kernel().gated())
        gate = piece.mutable_steps(i - 1)->mutable_kernel();
      const int before = gate != nullptr ? i - 2 : i - 1;
      const schema::KernelStep* norm = nullptr;
      if (before >= 0 && piece.steps(before).has_kernel() &&
          piece.steps(before).kernel().before_cublaslt())
        norm = &piece.steps(before).kernel();
      const schema::KernelStep* gating = nullptr;
      if (i + 1 < piece.steps_size() && piece.steps(i + 1).has_kernel() &&
          piece.steps(i + 1).kernel().after_cublaslt())
        gating = &piece.steps(i + 1).kernel();
      steps.push_back({step.mutable_gemm(), gate, norm, gating});
    }
  return steps;
}

// The measured time of kernel step `k` at size p (its tuned decision: the winner's time, else
// the default's), or 0 when it was not timed there.
double kernel_ms_at(const schema::KernelStep& k, int64_t p) {
  for (const auto& t : k.tuned())
    if (t.size() == static_cast<uint64_t>(p)) return t.ms() > 0 ? t.ms() : t.default_ms();
  return 0;
}

// The measured time of the skinny kernel of `site` at size p (its tuned decision), or 0.
double skinny_ms(const GemmSite& site, int64_t p) {
  if (site.skinny == nullptr ||
      std::find(site.gemm->skinny_sizes().begin(), site.gemm->skinny_sizes().end(),
                static_cast<uint32_t>(p)) == site.gemm->skinny_sizes().end())
    return 0;
  return kernel_ms_at(*site.skinny, p);
}

// Size p of `site` goes back to cuBLASLt (removed from both gated lists).
void drop_skinny(const GemmSite& site, int64_t p) {
  auto drop = [p](google::protobuf::RepeatedField<uint32_t>* sizes) {
    sizes->erase(std::remove(sizes->begin(), sizes->end(), static_cast<uint32_t>(p)), sizes->end());
  };
  drop(site.gemm->mutable_skinny_sizes());
  if (site.skinny != nullptr) drop(site.skinny->mutable_run_sizes());
}

// cuBLASLt measured `gemm_ms` at size p (0: not measured), where the GEMM has `rows` rows: where
// the skinny kernel measured slower than the cuBLASLt route (the GEMM plus the norm and gating
// kernels that run only there), p goes back to cuBLASLt; so does a skinny kernel of more than
// `untimed_max_m` rows that was not measured against cuBLASLt (AutotuneOptions).
void skinny_or_cublaslt(const GemmSite& site, int64_t p, int64_t rows, double gemm_ms,
                        int64_t untimed_max_m) {
  const double kernel_ms = skinny_ms(site, p);
  const bool skinny = std::find(site.gemm->skinny_sizes().begin(), site.gemm->skinny_sizes().end(),
                                static_cast<uint32_t>(p)) != site.gemm->skinny_sizes().end();
  if (!skinny) return;
  if (kernel_ms <= 0 || gemm_ms <= 0) {
    if (rows > untimed_max_m) {
      logger().info(
          "kiln: autotune: gemm '{}' at size {}: {} rows, not timed against cuBLASLt: "
          "cuBLASLt",
          site.gemm->node(), p, rows);
      drop_skinny(site, p);
    }
    return;
  }
  // The skinny kernel against everything the cuBLASLt route runs instead: the GEMM, and the norm
  // and gating the kernel folds in, as far as they were timed (0 where not).
  const double norm_ms = site.norm != nullptr ? kernel_ms_at(*site.norm, p) : 0;
  const double gating_ms = site.gating != nullptr ? kernel_ms_at(*site.gating, p) : 0;
  const double route_ms = gemm_ms + norm_ms + gating_ms;
  logger().info(
      "kiln: autotune: gemm '{}' at size {}: skinny kernel {:.4f} ms, cuBLASLt {:.4f} ms{}",
      site.gemm->node(), p, kernel_ms, route_ms,
      route_ms > gemm_ms ? fmt::format(" (the GEMM {:.4f}, norm {:.4f}, gating {:.4f})", gemm_ms,
                                       norm_ms, gating_ms)
                         : "");
  if (kernel_ms > route_ms) drop_skinny(site, p);
}

// The sizes the runtime plans GEMMs for: compile and capture sizes.
std::set<int64_t> gemm_sizes(const schema::Manifest& m) {
  std::set<int64_t> sizes;
  for (uint32_t s : m.config().compile_sizes()) sizes.insert(s);
  for (uint32_t s : m.config().cudagraph_capture_sizes()) sizes.insert(s);
  return sizes;
}

// One pass over every (GEMM step, size): a database hit decides, else timing within the budget.
struct GemmPass {
  const AutotuneOptions& options;
  TuneSession& session;
  GemmTuner* tuner;  // null: no GPU to time on, database hits only
  AutotuneReport& rep;
  Progress* progress;  // over the (step, size) pairs; null without a GPU (nothing is timed)
  int64_t cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  std::set<std::string> tuned_now = {};  // keys timed in this pass (repeats reuse them)

  Status decide(const GemmSite& site, int64_t p);
  Result<double> time(schema::GemmStep& g, int64_t p, const TuningKey& key);
};

Status GemmPass::decide(const GemmSite& site, int64_t p) {
  schema::GemmStep& g = *site.gemm;
  ++rep.gemms;
  KILN_ASSIGN_OR_RETURN(TuningKey key, key_of(g, p, session.arch(), cublaslt_version));
  if (const TuningEntry* hit = session.db().find(key)) {
    schema::GemmAlgo algo = hit->algo;
    algo.set_size(static_cast<uint32_t>(p));
    algo.set_source(tuned_now.count(key.to_string()) ? "autotune" : "tuning-db");
    algo.set_ms(hit->ms);
    set_algo(g, std::move(algo));
    ++rep.from_db;
    skinny_or_cublaslt(site, p, key.m, hit->ms, options.skinny_untimed_max_m);
    if (progress)
      progress->step(fmt::format("gemm '{}' size {}: from the tuning database", g.node(), p),
                     /*log_line=*/false);
    return Status::ok_status();
  }
  if (tuner == nullptr) {
    skinny_or_cublaslt(site, p, key.m, 0, options.skinny_untimed_max_m);
    return Status::ok_status();
  }
  if (session.over_budget("GEMMs keep the heuristic")) {
    ++rep.over_budget;
    progress->step("over the budget: heuristic kept", /*log_line=*/false);
    skinny_or_cublaslt(site, p, key.m, 0, options.skinny_untimed_max_m);
    return Status::ok_status();
  }
  KILN_ASSIGN_OR_RETURN(const double ms, time(g, p, key));
  skinny_or_cublaslt(site, p, key.m, ms, options.skinny_untimed_max_m);
  return Status::ok_status();
}

// Times the candidates of `g` at size `p`; the winner goes into `g` and the database. Returns
// the winner's time.
Result<double> GemmPass::time(schema::GemmStep& g, int64_t p, const TuningKey& key) {
  KILN_ASSIGN_OR_RETURN(GemmTiming t, tuner->tune(g, p, options.candidates));
  ++rep.timed;
  rep.improved += t.improved ? 1 : 0;
  progress->step(fmt::format(
      "gemm '{}' m={} n={} k={} batch={} (size {}): {} candidates, best {:.4f} ms (heuristic "
      "{:.4f} ms)",
      g.node(), key.m, key.n, key.k, key.batch, p, t.candidates, t.ms, t.heuristic_ms));
  TuningEntry entry;
  entry.algo = t.algo;
  entry.algo.clear_size();
  entry.algo.clear_source();
  entry.ms = t.ms;
  entry.heuristic_ms = t.heuristic_ms;
  session.db().put(key, entry);
  tuned_now.insert(key.to_string());
  t.algo.set_ms(t.ms);
  set_algo(g, t.algo);
  return t.ms;
}

Status tune_gemms(const AutotuneOptions& options, schema::Manifest& m, AutotuneReport& rep) {
  if (options.mode == AutotuneMode::kOff) {
    rep.skipped = "autotune is off";
    return Status::ok_status();
  }
  const std::set<int64_t> sizes = gemm_sizes(m);
  const std::vector<GemmSite> steps = gemm_steps(m);
  if (steps.empty() || sizes.empty()) {
    rep.skipped = steps.empty() ? "no GEMM steps" : "no compile or capture sizes to tune for";
    return Status::ok_status();
  }
  // Algorithms are per arch: with several targets one recorded choice would be wrong (and
  // logged as a fallback) on the others.
  if (m.config().targets_size() != 1) {
    rep.skipped =
        fmt::format("{} target archs; tuned algorithms are per arch", m.config().targets_size());
    if (options.mode == AutotuneMode::kOn) return failed_precondition("autotune: " + rep.skipped);
    return Status::ok_status();
  }
  KILN_ASSIGN_OR_RETURN(TuneSession session,
                        TuneSession::open(options, {m.config().targets(0)}, "GEMMs"));
  rep.skipped = session.skipped();
  std::unique_ptr<GemmTuner> tuner;
  if (session.gpu()) {
    KILN_ASSIGN_OR_RETURN(tuner, GemmTuner::create(m));
  }
  std::optional<Progress> progress;
  if (tuner) progress.emplace("autotune GEMMs", static_cast<int>(steps.size() * sizes.size()));
  GemmPass pass{options, session, tuner.get(), rep, progress ? &*progress : nullptr};
  for (const GemmSite& site : steps)
    for (int64_t p : sizes) KILN_RETURN_IF_ERROR(pass.decide(site, p));
  return session.close(&rep.seconds);
}

}  // namespace

Status autotune_gemms(const AutotuneOptions& options, schema::Manifest& m, AutotuneReport* report) {
  AutotuneReport local;
  AutotuneReport& rep = report != nullptr ? *report : local;
  rep = AutotuneReport{};
  Status st = tune_gemms(options, m, rep);
  logger().debug(
      "kiln: autotune: GEMMs: {} (GEMM, size) pairs, {} timed, {} from the tuning database, {} "
      "improved, {} over the budget, {:.1f} s{}",
      rep.gemms, rep.timed, rep.from_db, rep.improved, rep.over_budget, rep.seconds,
      rep.skipped.empty() ? "" : "; not timed: " + rep.skipped);
  return st;
}

}  // namespace kiln::compiler
