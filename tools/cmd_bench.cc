// kiln bench CACHE_DIR: load (with the LoadReport), create one executor per mode (with its
// CaptureReport), then per size: device latency of the replay (or eager launches) from CUDA
// events, and wall time of run() including the host copies — median and p90 over many runs that
// rotate through several random input sets, after a warm-up. --json prints all of it.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_layout.h"
#include "kiln/executor.h"
#include "kiln/model.h"
#include "runtime/median.h"
#include "tools/commands.h"
#include "tools/runtime_progress.h"
#include "tools/tensor_io.h"

namespace kiln::tools {
namespace {

using nlohmann::json;

struct Spread {
  double median = 0, p90 = 0, min = 0;
};

Spread spread_of(std::vector<double> v) {
  if (v.empty()) return {};
  Spread s;
  s.median = runtime::median(v);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.p90 = v[std::min(n - 1, static_cast<size_t>(std::ceil(0.9 * static_cast<double>(n))) - 1)];
  s.min = v.front();
  return s;
}

json spread_json(const Spread& s) { return {{"median", s.median}, {"p90", s.p90}, {"min", s.min}}; }

int64_t device_used_bytes() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return -1;
  return static_cast<int64_t>(total - free);
}

std::string mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

json load_json(const LoadReport& r) {
  return {{"resolve_verify_ms", r.resolve_verify_ms},
          {"validate_ms", r.validate_ms},
          {"device_init_ms", r.device_init_ms},
          {"weights_ms", r.weights_ms},
          {"weights_bytes", r.weights_bytes},
          {"weights_strategy", weights_upload_name(r.weights_strategy)},
          {"verified", r.verified},
          {"cubin_ms", r.cubin_ms},
          {"cublaslt_ms", r.cublaslt_ms},
          {"programmatic_launch", r.programmatic_launch},
          {"total_ms", r.total_ms}};
}

std::string load_line(const LoadReport& r) {
  return fmt::format(
      "total {:.1f} ms = resolve+verify {:.1f}, validate {:.1f}, device init {:.1f}, weights "
      "{:.1f} ({}, {}, {}), cubins {:.1f}, cuBLASLt {:.1f}; programmatic launch {}",
      r.total_ms, r.resolve_verify_ms, r.validate_ms, r.device_init_ms, r.weights_ms,
      mib(static_cast<double>(r.weights_bytes)), weights_upload_name(r.weights_strategy),
      r.verified ? "hashed" : "not hashed", r.cubin_ms, r.cublaslt_ms,
      r.programmatic_launch ? "on" : "off");
}

struct SizeResult {
  int64_t size = 0, padded = 0;
  bool replay = false;
  Spread device, wall;
};

// Warm-up, then `iters` runs rotating through `sets`; device time from the executor's events.
Result<SizeResult> bench_size(Executor& ex, const std::vector<std::vector<Tensor>>& sets, int64_t s,
                              const BenchArgs& a) {
  SizeResult r;
  r.size = s;
  const auto& captured = ex.captured_sizes();
  auto it = std::lower_bound(captured.begin(), captured.end(), s);
  r.replay = it != captured.end();
  r.padded = r.replay ? *it : s;
  for (int i = 0; i < a.warmup; ++i) KILN_RETURN_IF_ERROR(ex.run(sets[i % sets.size()]).status());
  std::vector<double> device, wall;
  // The timed runs are the profiled range of a profiler started with profiling off (`ncu
  // --profile-from-start off`, tools/bench/decode_profile.py --sizes); a no-op otherwise.
  (void)cudaProfilerStart();
  for (int i = 0; i < a.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    Status ran = ex.run(sets[i % sets.size()]).status();
    if (!ran.ok()) {
      (void)cudaProfilerStop();
      return ran;
    }
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    device.push_back(ex.stats().last_device_ms);
  }
  (void)cudaProfilerStop();
  r.device = spread_of(device);
  r.wall = spread_of(wall);
  return r;
}

// --mode and --weights as the runtime's enums.
struct BenchChoices {
  std::vector<CudaGraphMode> modes;  // empty: the artifact's and NONE
  WeightsUpload weights = WeightsUpload::kAuto;
};

Result<BenchChoices> parse_choices(const BenchArgs& a) {
  if (a.iters < 1 || a.warmup < 0 || a.input_sets < 3)
    return invalid_argument("--iters must be >= 1, --warmup >= 0, --input-sets >= 3");
  BenchChoices c;
  for (const std::string& name : a.modes) {
    auto m = cuda_graph_mode_from_name(name);
    if (!m) return invalid_argument("--mode: unknown cudagraph mode '" + name + "'");
    c.modes.push_back(*m);
  }
  std::optional<WeightsUpload> weights;
  for (WeightsUpload w :
       {WeightsUpload::kAuto, WeightsUpload::kDirect, WeightsUpload::kPinnedStaging})
    if (a.weights == weights_upload_name(w)) weights = w;
  if (!weights)
    return invalid_argument("--weights: '" + a.weights + "' is not auto, direct or pinned");
  c.weights = *weights;
  return c;
}

// The capture report of one executor, as JSON (its per-size runs are added later).
json mode_json(const CaptureReport& c, int64_t executor_bytes) {
  const size_t n = c.sizes.size();
  const double per_size = n == 0 ? 0.0 : static_cast<double>(c.graph_device_bytes) / n;
  json mj = {{"requested", cuda_graph_mode_name(c.requested)},
             {"effective", cuda_graph_mode_name(c.effective)},
             {"downgrade_reason", c.downgrade_reason},
             {"create_ms", c.total_ms},
             {"capture_ms", c.capture_ms},
             {"captured_sizes", n},
             {"arena_bytes", c.arena_bytes},
             {"workspace_bytes", c.workspace_bytes},
             {"graph_device_bytes", c.graph_device_bytes},
             {"graph_device_bytes_per_size", per_size},
             {"executor_device_bytes", executor_bytes},
             {"capture", json::array()},
             {"runs", json::array()}};
  for (const SizeCapture& sc : c.sizes)
    mj["capture"].push_back({{"size", sc.size},
                             {"graphs", sc.graphs},
                             {"ms", sc.ms},
                             {"device_bytes", sc.device_bytes}});
  return mj;
}

// The same as text: a line on the executor, then the header of its table of sizes.
void print_mode(const CaptureReport& c, int64_t executor_bytes) {
  const size_t n = c.sizes.size();
  const double per_size = n == 0 ? 0.0 : static_cast<double>(c.graph_device_bytes) / n;
  fmt::print(
      "\nmode {} (requested {}{}): created in {:.1f} ms; {} sizes captured in {:.1f} ms "
      "({:.2f} ms/size); graphs {} total, {:.1f} KiB/size; arena {}; workspace {}; executor "
      "device memory {}\n  {:>5} {:>5} {:>6}  {:>12} {:>9}  {:>12} {:>9}\n",
      cuda_graph_mode_name(c.effective), cuda_graph_mode_name(c.requested),
      c.downgrade_reason.empty() ? "" : ", downgraded: " + c.downgrade_reason, c.total_ms, n,
      c.capture_ms, n == 0 ? 0.0 : c.capture_ms / n, mib(c.graph_device_bytes), per_size / 1024.0,
      mib(c.arena_bytes), mib(c.workspace_bytes), mib(executor_bytes), "size", "P", "path",
      "device med", "p90", "run() med", "p90");
}

// One `kiln bench` run: everything goes into `out` (printed at the end with --json) and, without
// --json, is printed as it is measured.
struct Bench {
  const BenchArgs& a;
  std::filesystem::path dir;
  std::shared_ptr<const Model> m = nullptr;
  json out = json::object();
  std::map<int64_t, std::vector<std::pair<std::string, double>>> by_size = {};  // (mode, ms)

  // Loads the model with `weights` (its LoadReport and device memory); with --compare-upload
  // also loads it 3x with each strategy.
  Status load(WeightsUpload weights) {
    const int64_t used_before = device_used_bytes();
    LoadOptions lo;
    lo.weights = weights;
    lo.upload_progress = upload_progress_bar();
    KILN_ASSIGN_OR_RETURN(m, Model::load(dir, lo));
    const LoadReport& lr = m->load_report();
    out["model"] = m->name();
    out["artifact"] = dir.string();
    out["load"] = load_json(lr);
    out["load"]["device_bytes"] = device_used_bytes() - used_before;
    if (!a.json)
      fmt::print("kiln bench: {} ({})\nload: {}\n", m->name(), dir.string(), load_line(lr));
    if (!a.compare_upload) return Status::ok_status();
    out["upload_compare"] = json::array();
    for (WeightsUpload w : {WeightsUpload::kDirect, WeightsUpload::kPinnedStaging}) {
      for (int rep = 0; rep < 3; ++rep) {  // the file is in the page cache by now: warm reads
        LoadOptions o;
        o.weights = w;
        KILN_ASSIGN_OR_RETURN(auto again, Model::load(dir, o));
        const LoadReport& r = again->load_report();
        out["upload_compare"].push_back(load_json(r));
        if (!a.json)
          fmt::print("load ({}, warm page cache): {}\n", weights_upload_name(w), load_line(r));
      }
    }
    return Status::ok_status();
  }

  // --sizes, or 1, 8, 64 (those <= max_size).
  Result<std::vector<int64_t>> sizes() const {
    std::vector<int64_t> sizes = a.sizes;
    if (sizes.empty())
      for (int64_t s : {int64_t{1}, int64_t{8}, int64_t{64}})
        if (s <= m->max_size()) sizes.push_back(s);
    for (int64_t s : sizes)
      if (s < 1 || s > m->max_size())
        return invalid_argument(fmt::format("--sizes: {} is outside [1, {}]", s, m->max_size()));
    return sizes;
  }

  // --input-sets random input sets per size, shared by every mode.
  std::map<int64_t, std::vector<std::vector<Tensor>>> input_sets(
      const std::vector<int64_t>& sizes) const {
    std::mt19937 rng(a.seed);
    std::map<int64_t, std::vector<std::vector<Tensor>>> sets;
    for (int64_t s : sizes)
      for (int k = 0; k < a.input_sets; ++k) {
        std::vector<Tensor> set;
        for (const TensorInfo& info : m->inputs()) set.push_back(tensor_random(info, s, rng));
        sets[s].push_back(std::move(set));
      }
    return sets;
  }

  // An executor in `mode` (its CaptureReport), then every size timed on it.
  Status bench_mode(CudaGraphMode mode, const std::vector<int64_t>& sizes,
                    std::map<int64_t, std::vector<std::vector<Tensor>>>& sets) {
    const int64_t before = device_used_bytes();
    ExecutorOptions eo;
    eo.mode = mode;
    eo.time_runs = true;
    eo.capture_progress = capture_progress_bar();
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, Executor::create(m, eo));
    const int64_t executor_bytes = device_used_bytes() - before;
    const CaptureReport& c = ex->capture_report();
    json mj = mode_json(c, executor_bytes);
    if (!a.json) print_mode(c, executor_bytes);
    for (int64_t s : sizes) {
      auto r = bench_size(*ex, sets[s], s, a);
      if (!r.ok())
        return r.status().with_context(
            fmt::format("mode {} size {}", cuda_graph_mode_name(mode), s));
      const char* path = r->replay ? "replay" : "eager";
      mj["runs"].push_back({{"size", s},
                            {"padded", r->padded},
                            {"path", path},
                            {"iters", a.iters},
                            {"input_sets", a.input_sets},
                            {"device_ms", spread_json(r->device)},
                            {"wall_ms", spread_json(r->wall)}});
      by_size[s].emplace_back(cuda_graph_mode_name(c.effective), r->device.median);
      if (!a.json)
        fmt::print("  {:>5} {:>5} {:>6}  {:>9.4f} ms {:>9.4f}  {:>9.4f} ms {:>9.4f}\n", s,
                   r->padded, path, r->device.median, r->device.p90, r->wall.median, r->wall.p90);
    }
    out["modes"].push_back(std::move(mj));
    return Status::ok_status();
  }

  // Per size, each mode's device median and the ratio of the last mode to the first.
  void summary() {
    out["summary"] = json::array();
    if (!a.json) fmt::print("\nsummary (device median; ratio = last mode / first mode):\n");
    for (const auto& [s, rows] : by_size) {
      json sj = {{"size", s}};
      std::string line = fmt::format("  size {:>4}:", s);
      for (const auto& [name, ms] : rows) {
        sj[name + "_ms"] = ms;
        line += fmt::format(" {} {:.4f} ms", name, ms);
      }
      if (rows.size() >= 2 && rows.front().second > 0) {
        const double ratio = rows.back().second / rows.front().second;
        sj["ratio_last_over_first"] = ratio;
        line += fmt::format("  ({} / {} = {:.2f}x)", rows.back().first, rows.front().first, ratio);
      }
      out["summary"].push_back(sj);
      if (!a.json) fmt::print("{}\n", line);
    }
  }

  // Everything after the GPU check.
  Status run() {
    KILN_ASSIGN_OR_RETURN(BenchChoices choices, parse_choices(a));
    KILN_RETURN_IF_ERROR(load(choices.weights));
    if (choices.modes.empty()) choices.modes = {m->configured_mode(), CudaGraphMode::kNone};
    KILN_ASSIGN_OR_RETURN(const std::vector<int64_t> sz, sizes());
    auto sets = input_sets(sz);
    out["modes"] = json::array();
    for (CudaGraphMode mode : choices.modes) KILN_RETURN_IF_ERROR(bench_mode(mode, sz, sets));
    summary();
    if (a.json) fmt::print("{}\n", out.dump(2));
    return Status::ok_status();
  }
};

}  // namespace

int cmd_bench(const BenchArgs& a) {
  auto fail = [](const Status& s) {
    fmt::print(stderr, "kiln bench: {}\n", s.to_string());
    return kExitError;
  };
  auto dir = cache::artifact_resolve(a.cache_dir);
  if (!dir.ok()) return fail(dir.status());
  std::string why;
  if (!cuda_device_available(&why)) {
    fmt::print("kiln bench: {}\nBenchmarking {} needs a CUDA GPU.\n", why, dir->string());
    return kExitNoGpu;
  }
  Bench bench{a, *dir};
  if (Status s = bench.run(); !s.ok()) return fail(s);
  return kExitOk;
}

}  // namespace kiln::tools
