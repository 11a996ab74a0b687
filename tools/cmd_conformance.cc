// kiln conformance DIR...: backend-test folders compiled, run on the GPU and compared with their
// stored outputs; a table (or JSON) of passed / failed / not compiled / excluded.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/model.h"
#include "tools/commands.h"
#include "tools/conformance.h"
#include "tools/conformance_run.h"

namespace kiln::tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Each DIR is a backend-test folder (it has a model.onnx) or holds such folders (sorted).
Result<std::vector<fs::path>> folders_of(const std::vector<std::string>& dirs) {
  std::vector<fs::path> out;
  for (const std::string& arg : dirs) {
    fs::path d(arg);
    if (d.filename().empty()) d = d.parent_path();  // "dir/": the folder's name is its last part
    if (fs::exists(d / "model.onnx")) {
      out.push_back(d);
      continue;
    }
    if (!fs::is_directory(d)) return not_found(fmt::format("{}: no such folder", arg));
    std::vector<fs::path> inner;
    for (const auto& e : fs::directory_iterator(d))
      if (fs::exists(e.path() / "model.onnx")) inner.push_back(e.path());
    if (inner.empty())
      return not_found(fmt::format("{}: neither a model.onnx nor folders holding one", arg));
    std::sort(inner.begin(), inner.end());
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

// A fresh cache directory for the run's artifacts; removed when the run ends.
struct ScratchCache {
  fs::path path;
  ScratchCache() {
    std::string tmpl = (fs::temp_directory_path() / "kiln-conformance-XXXXXX").string();
    if (mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~ScratchCache() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

json output_json(const OutputCheck& c) {
  json j{{"output", c.output},       {"ok", c.ok},
         {"count", c.count},         {"mismatches", c.mismatches},
         {"max_error", c.max_error}, {"index", c.index}};
  if (c.index >= 0) {
    j["got"] = c.got;
    j["stored"] = c.want;
  }
  if (!c.problem.empty()) j["problem"] = c.problem;
  return j;
}

json folder_json(const FolderResult& r) {
  json sets = json::array();
  for (const SetResult& s : r.sets) {
    json outputs = json::array();
    for (const OutputCheck& c : s.outputs) outputs.push_back(output_json(c));
    sets.push_back({{"set", s.set},
                    {"size", s.size},
                    {"verdict", verdict_name(s.verdict)},
                    {"detail", s.detail},
                    {"outputs", outputs}});
  }
  return {{"name", r.name},     {"dir", r.dir.string()},  {"verdict", verdict_name(r.verdict)},
          {"detail", r.detail}, {"compiles", r.compiles}, {"seconds", r.seconds},
          {"sets", sets}};
}

void print_row(const FolderResult& r, size_t width) {
  std::string row =
      fmt::format("{:<{}}  {:<12}  {}", r.name, width, verdict_name(r.verdict), r.detail);
  row.erase(row.find_last_not_of(' ') + 1);
  fmt::print("{}\n", row);
  // A folder that did not pass shows each data set, when they differ.
  const bool alike = std::all_of(r.sets.begin(), r.sets.end(), [&](const SetResult& s) {
    return s.verdict == r.sets[0].verdict && s.detail == r.sets[0].detail;
  });
  if (alike || r.verdict == Verdict::kPassed) return;
  for (const SetResult& s : r.sets)
    fmt::print("{:<{}}  {:<12}  S={} {}\n", "  " + s.set, width, verdict_name(s.verdict), s.size,
               s.detail);
  std::fflush(stdout);
}

}  // namespace

int cmd_conformance(const ConformanceArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  ConformanceOptions opts;
  opts.size_dim = a.size_dim;
  opts.autotune = a.autotune;
  opts.compile_only = a.compile_only;
  if (a.level >= 0) opts.level = a.level;
  if (!a.precision.empty()) {
    for (auto p : {compiler::Precision::kF32, compiler::Precision::kTF32, compiler::Precision::kF16,
                   compiler::Precision::kBF16})
      if (compiler::precision_name(p) == a.precision) opts.precision = p;
    if (!opts.precision) {
      fmt::print(stderr, "kiln conformance: --precision '{}': expected fp32, tf32, fp16 or bf16\n",
                 a.precision);
      return kExitUsage;
    }
  }
  if (!a.mode.empty()) {
    opts.mode = cuda_graph_mode_from_name(a.mode);
    if (!opts.mode) {
      fmt::print(stderr, "kiln conformance: --mode '{}': unknown cudagraph mode\n", a.mode);
      return kExitUsage;
    }
  }
  Exclusions exclusions;
  if (!a.exclude.empty()) {
    auto ex = conformance_exclusions_read(a.exclude);
    if (!ex.ok()) {
      fmt::print(stderr, "kiln conformance: --exclude: {}\n", ex.status().message());
      return kExitUsage;
    }
    exclusions = std::move(*ex);
  }
  auto folders = folders_of(a.dirs);
  if (!folders.ok()) {
    fmt::print(stderr, "kiln conformance: {}\n", folders.status().message());
    return kExitUsage;
  }
  std::string why;
  if (!a.compile_only && !cuda_device_available(&why)) {
    fmt::print(stderr,
               "kiln conformance: no usable CUDA device ({}): nothing was run; "
               "--compile-only compiles without one\n",
               why);
    return kExitNoGpu;
  }
  ScratchCache cache;
  if (cache.path.empty()) {
    fmt::print(stderr, "kiln conformance: cannot create a scratch cache in {}\n",
               fs::temp_directory_path().string());
    return kExitError;
  }

  size_t width = 24;
  for (const fs::path& d : *folders) width = std::max(width, d.filename().string().size() + 2);
  if (!a.json)
    fmt::print("{} folder(s), precision {}{}\n", folders->size(),
               a.precision.empty() ? "as each kiln.yaml says (default fp32)" : a.precision,
               a.compile_only ? ", compile only" : "");
  std::map<Verdict, int> totals;
  json rows = json::array();
  for (const fs::path& d : *folders) {
    FolderResult r;
    if (auto reason = conformance_excluded(exclusions, d.filename().string())) {
      r.name = d.filename().string();
      r.dir = d;
      r.verdict = Verdict::kExcluded;
      r.detail = *reason;
    } else {
      r = conformance_run_folder(d, opts, cache.path);
    }
    ++totals[r.verdict];
    if (a.json) {
      rows.push_back(folder_json(r));
    } else {
      print_row(r, width);
    }
  }
  for (const auto& [pattern, reason] : exclusions) {
    const bool used = std::any_of(folders->begin(), folders->end(), [&](const fs::path& d) {
      return conformance_excluded({{pattern, reason}}, d.filename().string()).has_value();
    });
    if (!used)
      fmt::print(stderr, "kiln conformance: note: exclusion '{}' matches no folder\n", pattern);
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (a.json) {
    json t;
    for (Verdict v : {Verdict::kPassed, Verdict::kFailed, Verdict::kNotCompiled, Verdict::kExcluded,
                      Verdict::kCompiled})
      t[std::string(verdict_name(v))] = totals[v];
    fmt::print("{}\n", json{{"precision", a.precision.empty() ? "kiln.yaml" : a.precision},
                            {"compile_only", a.compile_only},
                            {"folders", rows},
                            {"totals", t},
                            {"seconds", secs}}
                           .dump(1));
  } else {
    fmt::print(
        "totals: {} passed, {} failed, {} not compiled, {} excluded{} ({} folders, {:.1f} s)\n",
        totals[Verdict::kPassed], totals[Verdict::kFailed], totals[Verdict::kNotCompiled],
        totals[Verdict::kExcluded],
        a.compile_only ? fmt::format(", {} compiled", totals[Verdict::kCompiled]) : "",
        folders->size(), secs);
  }
  if (totals[Verdict::kFailed] > 0) return kExitMismatch;
  if (totals[Verdict::kNotCompiled] > 0) return kExitError;
  return kExitOk;
}

}  // namespace kiln::tools
