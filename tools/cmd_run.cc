// kiln run: load an artifact, run input sets (files, an --expect data set, or random inputs at
// --sizes), check them (--expect: stored outputs; --reference: the CPU reference), time graph
// replay against eager launches, optionally write the outputs (--output-dir). --json prints one
// object on stdout instead of the text.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "cache/cache_layout.h"
#include "cache/manifest_io.h"
#include "compiler/frontend/onnx_import.h"
#include "compiler/reference/reference_compare.h"
#include "compiler/reference/reference_interpreter.h"
#include "kiln/executor.h"
#include "kiln/model.h"
#include "runtime/median.h"
#include "tools/commands.h"
#include "tools/conformance.h"
#include "tools/npy_io.h"
#include "tools/run_inputs.h"
#include "tools/runtime_progress.h"
#include "tools/tensor_io.h"

namespace kiln::tools {
namespace {

using nlohmann::json;

compiler::Precision precision_of(const std::string& name) {
  for (auto p : {compiler::Precision::kF32, compiler::Precision::kTF32, compiler::Precision::kF16,
                 compiler::Precision::kBF16})
    if (compiler::precision_name(p) == name) return p;
  return compiler::Precision::kF32;
}

std::string head(const std::vector<double>& v, int n) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(n, v.size()); ++i) s += fmt::format("{:10.6f} ", v[i]);
  return s;
}

std::string head(const Tensor& t, int n) { return head(tensor_to_ref(t).data, n); }

double median_wall_ms(Executor& ex, const std::vector<Tensor>& inputs, int iters) {
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!ex.run(inputs).ok()) return -1;
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return runtime::median(std::move(ms));
}

struct InputSet {
  std::vector<Tensor> tensors;
  int64_t size = -1;             // the run-time size S
  std::vector<Tensor> expected;  // --expect: the stored outputs
};

struct Runner {
  const RunArgs& args;
  compiler::Precision precision;  // the artifact's: the reference tolerance depends on it
  RunInputs given;                // -i files or the --expect set, read before the GPU check
  std::shared_ptr<Model> model = nullptr;
  std::unique_ptr<Executor> graphs = nullptr, eager = nullptr;
  std::optional<ir::Graph> reference = std::nullopt;
  bool all_ok = true;
  json report = json::object();  // --json

  // Human text on stdout, unless --json (then stdout carries only the JSON object).
  template <typename... T>
  void say(fmt::format_string<T...> f, T&&... v) {
    if (!args.json) fmt::print(f, std::forward<T>(v)...);
  }

  // One output against a stored or reference tensor: prints the verdict, records it in `j`.
  void compare(const Tensor& o, const compiler::RefTensor& want, const char* against, json& j) {
    const auto tol = compiler::tolerance_end_to_end(precision);
    const OutputCheck c = conformance_compare(o.name, tensor_to_ref(o), want, tol);
    all_ok &= c.ok;
    say("    {:<9} : {}\n    {} — {} (rtol {:g}, atol {:g})\n", against, head(want.data, 6),
        c.ok ? "MATCH" : "MISMATCH", c.summary(), tol.rtol, tol.atol);
    j[against] = {{"ok", c.ok}, {"max_error", c.max_error}, {"summary", c.summary()}};
  }

  // --output-dir: every output as DIR[/size_S]/<name>.npy (or .pb).
  Status write_outputs(const std::vector<Tensor>& outs, int64_t s, size_t n_sets) {
    if (args.output_dir.empty()) return Status::ok_status();
    std::filesystem::path dir = args.output_dir;
    if (n_sets > 1) dir /= fmt::format("size_{}", s);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) return io_error(fmt::format("--output-dir {}: {}", dir.string(), ec.message()));
    for (const Tensor& o : outs) {
      const auto path = dir / (tensor_file_name(o.name) + "." + args.output_format);
      KILN_RETURN_IF_ERROR(args.output_format == "pb" ? tensor_write_pb(path, o)
                                                      : npy_write(path, o));
      say("  wrote {}\n", path.string());
    }
    return Status::ok_status();
  }

  // Runs one input set: prints outputs, the comparisons and timings.
  Status run_once(const InputSet& set, size_t n_sets) {
    const std::vector<Tensor>& inputs = set.tensors;
    const int64_t s = set.size;
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outs, graphs->run(inputs));
    const auto& captured = graphs->captured_sizes();
    auto it = std::lower_bound(captured.begin(), captured.end(), s);
    const bool replay = it != captured.end();
    const int64_t padded = replay ? *it : s;
    say("size {} → {}\n", s,
        replay ? fmt::format("padded to {}, CUDA graph replay ({})", padded,
                             cuda_graph_mode_name(graphs->mode()))
               : std::string("no captured size fits: eager launch program"));
    json js = {{"size", s}, {"padded", padded}, {"replay", replay}, {"outputs", json::array()}};
    std::map<std::string, compiler::RefTensor> ref_out;
    if (reference) {
      std::map<std::string, compiler::RefTensor> ref_in;
      for (const Tensor& t : inputs) ref_in[t.name] = tensor_to_ref(t);
      KILN_ASSIGN_OR_RETURN(ref_out, compiler::reference_run(*reference, s, ref_in));
    }
    for (const Tensor& o : outs) {
      std::string shape;
      for (int64_t d : o.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      say("  {:<10} [{}]  checksum {:.6f}\n    kiln      : {}\n", o.name, shape, tensor_checksum(o),
          head(o, 6));
      json jo = {{"name", o.name},
                 {"dtype", std::string(dtype_name(o.dtype))},
                 {"shape", o.shape},
                 {"checksum", tensor_checksum(o)}};
      for (const Tensor& e : set.expected)
        if (e.name == o.name) compare(o, tensor_to_ref(e), "expected", jo);
      if (reference) {
        auto r = ref_out.find(o.name);
        if (r == ref_out.end())
          return internal_error("reference produced no output '" + o.name + "'");
        compare(o, r->second, "reference", jo);
      }
      js["outputs"].push_back(std::move(jo));
    }
    for (const Tensor& e : set.expected)
      if (std::none_of(outs.begin(), outs.end(), [&](const Tensor& o) { return o.name == e.name; }))
        return internal_error("the run produced no output '" + e.name + "'");
    KILN_RETURN_IF_ERROR(write_outputs(outs, s, n_sets));
    KILN_ASSIGN_OR_RETURN(double t_graph, graphs->time_device(padded, args.iters));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> unused, eager->run(inputs));
    KILN_ASSIGN_OR_RETURN(double t_eager, eager->time_device(s, args.iters));
    const double wall = median_wall_ms(*graphs, inputs, std::min(args.iters, 50));
    say("  time per run (device, median of {}): {} {:.4f} ms, eager launches {:.4f} ms; "
        "run() incl. copies {:.4f} ms\n",
        args.iters, replay ? "graph replay" : "eager", t_graph, t_eager, wall);
    js["ms"] = {{"graph_or_eager", t_graph}, {"eager", t_eager}, {"run_wall", wall}};
    report["sets"].push_back(std::move(js));
    return Status::ok_status();
  }

  // Loads the model and creates the executors (the artifact's or --mode's graph mode, and an
  // eager one to compare with); prints the load line.
  Status load(const std::filesystem::path& dir) {
    LoadOptions lo;
    lo.upload_progress = upload_progress_bar();
    KILN_ASSIGN_OR_RETURN(model, Model::load(dir, lo));
    ExecutorOptions opts;
    opts.capture_progress = capture_progress_bar();
    if (!args.mode.empty()) {
      opts.mode = cuda_graph_mode_from_name(args.mode);
      if (!opts.mode) return invalid_argument("--mode: unknown cudagraph mode '" + args.mode + "'");
    }
    auto t0 = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(graphs, Executor::create(model, opts));
    const double create_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    KILN_ASSIGN_OR_RETURN(eager,
                          Executor::create(model, ExecutorOptions{CudaGraphMode::kNone, false}));
    const LoadReport& lr = model->load_report();
    const CaptureReport& cr = graphs->capture_report();
    say("loaded {} ({}) in {:.1f} ms (weights {:.1f} ms, {} bytes, {}); executor mode {}, {} "
        "sizes captured in {:.1f} ms\n",
        model->name(), dir.string(), lr.total_ms, lr.weights_ms, lr.weights_bytes,
        weights_upload_name(lr.weights_strategy), cuda_graph_mode_name(graphs->mode()),
        graphs->captured_sizes().size(), create_ms);
    if (!cr.downgrade_reason.empty()) say("  {}\n", cr.downgrade_reason);
    report["model"] = model->name();
    report["artifact"] = dir.string();
    report["load_ms"] = lr.total_ms;
    report["mode"] = cuda_graph_mode_name(graphs->mode());
    report["downgrade_reason"] = cr.downgrade_reason;
    report["captured_sizes"] = graphs->captured_sizes();
    report["capture_ms"] = create_ms;
    return Status::ok_status();
  }

  // --reference: the ONNX model imported with the artifact's size_dim and dims.
  Status load_reference(const schema::Manifest& manifest) {
    if (args.reference.empty()) return Status::ok_status();
    compiler::ImportOptions io;
    io.size_dim = manifest.config().size_dim();
    for (const auto& [k, v] : manifest.config().dims()) io.dims[k] = v;
    KILN_ASSIGN_OR_RETURN(reference, compiler::onnx_import_file(args.reference, io));
    return Status::ok_status();
  }

  // The input sets to run: the -i files or the --expect set (one set, its size read off the
  // tensors), or random inputs at each of --sizes.
  Result<std::vector<InputSet>> input_sets() const {
    std::vector<InputSet> out;
    if (!given.tensors.empty()) {
      out.push_back(InputSet{given.tensors, given.size, given.expected});
      return out;
    }
    std::vector<int64_t> sizes = args.sizes;
    if (sizes.empty()) sizes = {1, 3, model->max_size()};
    std::mt19937 rng(args.seed);
    for (int64_t s : sizes) {
      InputSet set{{}, s, {}};
      for (const TensorInfo& info : model->inputs()) {
        if (s < 1 || s > model->max_size())
          return invalid_argument(
              fmt::format("--sizes: {} is outside [1, {}]", s, model->max_size()));
        set.tensors.push_back(tensor_random(info, s, rng));
      }
      out.push_back(std::move(set));
    }
    return out;
  }

  // Everything after the GPU check: load, run every input set, print the summary.
  Status run_all(const std::filesystem::path& dir, const schema::Manifest& manifest) {
    KILN_RETURN_IF_ERROR(load(dir));
    KILN_RETURN_IF_ERROR(load_reference(manifest));
    KILN_ASSIGN_OR_RETURN(std::vector<InputSet> sets, input_sets());
    report["sets"] = json::array();
    for (const InputSet& set : sets) KILN_RETURN_IF_ERROR(run_once(set, sets.size()));
    const ExecutorStats st = graphs->stats();
    const bool checked = !args.reference.empty() || !args.expect.empty();
    say("summary: {} input set(s); graph replays {}, eager runs {}; {}\n", sets.size(),
        st.graph_replays, st.eager_runs,
        !checked ? std::string("outputs not checked")
                 : fmt::format("{}{}{}", args.expect.empty() ? "" : "expected outputs",
                               !args.expect.empty() && !args.reference.empty() ? " and " : "",
                               args.reference.empty() ? "" : "reference") +
                       (all_ok ? ": MATCH" : ": MISMATCH"));
    report["graph_replays"] = st.graph_replays;
    report["eager_runs"] = st.eager_runs;
    report["checked"] = checked;
    return Status::ok_status();
  }
};

// Prints the failure (as JSON with --json) and returns `code`.
int run_failed(const RunArgs& a, const std::string& message, int code,
               json report = json::object()) {
  if (a.json) {
    report["ok"] = false;
    report["error"] = message;
    fmt::print("{}\n", report.dump(2));
  } else {
    fmt::print(code == kExitNoGpu ? stdout : stderr, "kiln run: {}\n", message);
  }
  return code;
}

}  // namespace

int cmd_run(const RunArgs& a) {
  auto dir = cache::artifact_resolve(a.cache_dir);
  if (!dir.ok()) return run_failed(a, dir.status().message(), kExitError);
  auto manifest = cache::manifest_read(*dir / std::string(cache::kManifestFileName));
  if (!manifest.ok()) return run_failed(a, manifest.status().message(), kExitError);
  // Inputs are read and checked first: a wrong file is an error here too, GPU or not.
  json report = {{"model", manifest->model_name()}, {"artifact", dir->string()}};
  auto given = run_inputs_read(a.inputs, a.expect, *manifest);
  if (!given.ok()) return run_failed(a, given.status().message(), kExitError, std::move(report));
  if (!given->tensors.empty()) {  // what was checked, for --json
    report["size"] = given->size;
    report["inputs"] = json::array();
    for (const Tensor& t : given->tensors)
      report["inputs"].push_back(
          {{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}});
  }
  std::string why;
  if (!cuda_device_available(&why))
    return run_failed(a,
                      fmt::format("{}\nThe artifact {} is compiled and its inputs check out; "
                                  "running it needs a CUDA GPU.",
                                  why, dir->string()),
                      kExitNoGpu, std::move(report));
  Runner r{a, precision_of(manifest->config().precision()), std::move(*given)};
  r.report = std::move(report);
  if (Status s = r.run_all(*dir, *manifest); !s.ok())
    return run_failed(a, s.to_string(), kExitError, std::move(r.report));
  if (a.json) {
    r.report["ok"] = r.all_ok;
    fmt::print("{}\n", r.report.dump(2));
  }
  return r.all_ok ? kExitOk : kExitMismatch;
}

}  // namespace kiln::tools
