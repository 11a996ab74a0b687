#include "tools/conformance_run.h"

#include <fmt/format.h>

#include <chrono>
#include <map>

#include "compiler/pipeline.h"
#include "kiln/executor.h"
#include "kiln/model.h"
#include "tools/tensor_io.h"

namespace kiln::tools {
namespace {

// Compares every output the model declares (by name) with the set's stored ones.
SetResult check_outputs(const ConformanceFolder& f, const ConformanceBinding& b, size_t i,
                        const std::map<std::string, compiler::RefTensor>& got,
                        compiler::Tolerance tol) {
  const ConformanceDataSet& set = f.sets[b.sets[i]];
  SetResult r{set.name, b.sizes[i], Verdict::kPassed, "", {}};
  double max_error = 0;
  for (size_t j = 0; j < f.outputs.size(); ++j) {
    auto it = got.find(f.outputs[j]);
    if (it == got.end()) {
      r.verdict = Verdict::kFailed;
      r.detail = fmt::format("no output '{}'", f.outputs[j]);
      return r;
    }
    OutputCheck c = conformance_compare(f.outputs[j], it->second, set.outputs[j], tol);
    max_error = std::max(max_error, c.max_error);
    if (!c.ok && r.verdict == Verdict::kPassed) {
      r.verdict = Verdict::kFailed;
      r.detail = c.summary();
    }
    r.outputs.push_back(std::move(c));
  }
  if (r.verdict == Verdict::kPassed) r.detail = fmt::format("max|err| {:.3g}", max_error);
  return r;
}

// Every set of the binding gets the same verdict and detail (a compile or load error).
void all_sets(const ConformanceFolder& f, const ConformanceBinding& b, Verdict v,
              const std::string& detail, FolderResult& r) {
  for (size_t i = 0; i < b.sets.size(); ++i)
    r.sets.push_back({f.sets[b.sets[i]].name, b.sizes[i], v, detail, {}});
}

// Loads the artifact and runs the binding's sets on the GPU.
void run_binding(const ConformanceFolder& f, const ConformanceBinding& b,
                 const std::filesystem::path& artifact, compiler::Tolerance tol, FolderResult& r) {
  auto model = Model::load(artifact);
  if (!model.ok())
    return all_sets(f, b, Verdict::kFailed, "load: " + first_line(model.status().to_string()), r);
  auto ex = Executor::create(*model);
  if (!ex.ok())
    return all_sets(f, b, Verdict::kFailed, "executor: " + first_line(ex.status().to_string()), r);
  for (size_t i = 0; i < b.sets.size(); ++i) {
    const ConformanceDataSet& set = f.sets[b.sets[i]];
    auto outs = (*ex)->run(set.inputs);
    if (!outs.ok()) {
      r.sets.push_back({set.name,
                        b.sizes[i],
                        Verdict::kFailed,
                        "run: " + first_line(outs.status().to_string()),
                        {}});
      continue;
    }
    std::map<std::string, compiler::RefTensor> got;
    for (const Tensor& t : *outs) got[t.name] = tensor_to_ref(t);
    r.sets.push_back(check_outputs(f, b, i, got, tol));
  }
}

}  // namespace

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kPassed:
      return "passed";
    case Verdict::kFailed:
      return "failed";
    case Verdict::kNotCompiled:
      return "not compiled";
    case Verdict::kExcluded:
      return "excluded";
    case Verdict::kCompiled:
      return "compiled";
  }
  return "?";
}

void conformance_settle(FolderResult& r) {
  for (Verdict v : {Verdict::kFailed, Verdict::kNotCompiled, Verdict::kCompiled})
    for (const SetResult& s : r.sets)
      if (s.verdict == v) {
        r.verdict = v;
        r.detail = v == Verdict::kCompiled ? "" : s.set + ": " + s.detail;
        return;
      }
  r.verdict = Verdict::kPassed;
  double max_error = 0;
  for (const SetResult& s : r.sets)
    for (const OutputCheck& c : s.outputs) max_error = std::max(max_error, c.max_error);
  r.detail = fmt::format("max|err| {:.3g}", max_error);
}

FolderResult conformance_run_folder(const std::filesystem::path& dir,
                                    const ConformanceOptions& opts,
                                    const std::filesystem::path& cache_root) {
  const auto start = std::chrono::steady_clock::now();
  FolderResult r;
  r.dir = dir;
  r.name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  auto finish = [&](Verdict v, const std::string& detail) {
    r.verdict = v;
    r.detail = detail;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return r;
  };
  auto folder = conformance_folder_read(dir);
  if (!folder.ok()) return finish(Verdict::kNotCompiled, first_line(folder.status().to_string()));
  auto bindings = conformance_bindings(*folder, conformance_size_dim(*folder, opts.size_dim));
  if (!bindings.ok())
    return finish(Verdict::kNotCompiled, first_line(bindings.status().to_string()));
  for (const ConformanceBinding& b : *bindings) {
    const compiler::CompileConfig config = conformance_config(*folder, b, opts);
    auto out = compiler::compile_model({dir / "model.onnx", config, cache_root});
    if (!out.ok()) {
      all_sets(*folder, b, Verdict::kNotCompiled, first_line(out.status().to_string()), r);
      continue;
    }
    ++r.compiles;
    if (opts.compile_only) {
      all_sets(*folder, b, Verdict::kCompiled, "", r);
      continue;
    }
    run_binding(*folder, b, out->artifact_dir, compiler::tolerance_end_to_end(config.precision), r);
  }
  conformance_settle(r);
  return finish(r.verdict, r.detail);
}

std::vector<SetResult> conformance_reference_check(const ConformanceFolder& f,
                                                   const ConformanceBinding& b,
                                                   const ir::Graph& graph,
                                                   compiler::Tolerance tol) {
  std::vector<SetResult> out;
  for (size_t i = 0; i < b.sets.size(); ++i) {
    const ConformanceDataSet& set = f.sets[b.sets[i]];
    std::map<std::string, compiler::RefTensor> inputs;
    for (const Tensor& t : set.inputs) inputs[t.name] = tensor_to_ref(t);
    auto got = compiler::reference_run(graph, b.sizes[i], inputs);
    if (!got.ok()) {
      out.push_back({set.name,
                     b.sizes[i],
                     Verdict::kFailed,
                     "reference: " + first_line(got.status().to_string()),
                     {}});
      continue;
    }
    out.push_back(check_outputs(f, b, i, *got, tol));
  }
  return out;
}

}  // namespace kiln::tools
