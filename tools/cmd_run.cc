#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
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
#include "tools/tensor_io.h"

namespace kiln::tools {
namespace {

compiler::Precision precision_of(const std::string& name) {
  for (auto p : {compiler::Precision::kF32, compiler::Precision::kTF32, compiler::Precision::kF16,
                 compiler::Precision::kBF16})
    if (compiler::precision_name(p) == name) return p;
  return compiler::Precision::kF32;
}

int64_t size_of(const TensorInfo& info, const Tensor& t) {
  if (info.size_axis < 0 || info.size_axis >= static_cast<int>(t.shape.size())) return -1;
  const DimSpec& d = info.dims[info.size_axis];
  return (t.shape[info.size_axis] - d.offset) / d.coef;
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
  int64_t size = -1;  // the run-time size S
};

struct Runner {
  const RunArgs& args;
  compiler::Precision precision;  // the artifact's: the reference tolerance depends on it
  std::shared_ptr<Model> model = nullptr;
  std::unique_ptr<Executor> graphs = nullptr, eager = nullptr;
  std::optional<ir::Graph> reference = std::nullopt;
  bool all_ok = true;

  // Runs one input set: prints outputs, the reference comparison and timings.
  Status run_once(const std::vector<Tensor>& inputs, int64_t s) {
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> outs, graphs->run(inputs));
    const auto& captured = graphs->captured_sizes();
    auto it = std::lower_bound(captured.begin(), captured.end(), s);
    const bool replay = it != captured.end();
    const int64_t padded = replay ? *it : s;
    fmt::print("size {} → {}\n", s,
               replay ? fmt::format("padded to {}, CUDA graph replay ({})", padded,
                                    cuda_graph_mode_name(graphs->mode()))
                      : std::string("no captured size fits: eager launch program"));
    std::map<std::string, compiler::RefTensor> ref_out;
    if (reference) {
      std::map<std::string, compiler::RefTensor> ref_in;
      for (const Tensor& t : inputs) ref_in[t.name] = tensor_to_ref(t);
      KILN_ASSIGN_OR_RETURN(ref_out, compiler::reference_run(*reference, s, ref_in));
    }
    for (const Tensor& o : outs) {
      std::string shape;
      for (int64_t d : o.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
      fmt::print("  {:<10} [{}]  checksum {:.6f}\n    kiln      : {}\n", o.name, shape,
                 tensor_checksum(o), head(o, 6));
      if (!reference) continue;
      auto r = ref_out.find(o.name);
      if (r == ref_out.end())
        return internal_error("reference produced no output '" + o.name + "'");
      const auto tol = compiler::tolerance_end_to_end(precision);
      const std::vector<double> got = tensor_to_ref(o).data;
      const std::vector<float> got_f(got.begin(), got.end());
      const auto cmp = compiler::compare_with_reference(got_f.data(), r->second.data, tol);
      all_ok &= cmp.ok() && static_cast<int64_t>(r->second.data.size()) == o.numel();
      fmt::print("    reference : {}\n    {} — {} (rtol {:g}, atol {:g})\n",
                 head(r->second.data, 6), cmp.ok() ? "MATCH" : "MISMATCH", cmp.summary(), tol.rtol,
                 tol.atol);
    }
    KILN_ASSIGN_OR_RETURN(double t_graph, graphs->time_device(padded, args.iters));
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> unused, eager->run(inputs));
    KILN_ASSIGN_OR_RETURN(double t_eager, eager->time_device(s, args.iters));
    const double wall = median_wall_ms(*graphs, inputs, std::min(args.iters, 50));
    fmt::print(
        "  time per run (device, median of {}): {} {:.4f} ms, eager launches {:.4f} ms; "
        "run() incl. copies {:.4f} ms\n",
        args.iters, replay ? "graph replay" : "eager", t_graph, t_eager, wall);
    return Status::ok_status();
  }

  // Loads the model and creates the executors (the artifact's or --mode's graph mode, and an
  // eager one to compare with); prints the load line.
  Status load(const std::filesystem::path& dir) {
    KILN_ASSIGN_OR_RETURN(model, Model::load(dir));
    ExecutorOptions opts;
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
    fmt::print(
        "loaded {} ({}) in {:.1f} ms (weights {:.1f} ms, {} bytes, {}); executor mode {}, {} "
        "sizes captured in {:.1f} ms\n",
        model->name(), dir.string(), lr.total_ms, lr.weights_ms, lr.weights_bytes,
        weights_upload_name(lr.weights_strategy), cuda_graph_mode_name(graphs->mode()),
        graphs->captured_sizes().size(), create_ms);
    if (!cr.downgrade_reason.empty()) fmt::print("  {}\n", cr.downgrade_reason);
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

  // The input sets to run: the --input files (one set, its size read off the tensors), or random
  // inputs at each of --sizes.
  Result<std::vector<InputSet>> input_sets() const {
    std::vector<InputSet> out;
    if (!args.inputs.empty()) {
      InputSet set;
      for (const auto& path : args.inputs) {
        KILN_ASSIGN_OR_RETURN(Tensor t, tensor_read_pb(path));
        set.tensors.push_back(std::move(t));
      }
      for (const Tensor& t : set.tensors)
        for (const TensorInfo& info : model->inputs())
          if (info.name == t.name && size_of(info, t) > 0) set.size = size_of(info, t);
      out.push_back(std::move(set));
      return out;
    }
    std::vector<int64_t> sizes = args.sizes;
    if (sizes.empty()) sizes = {1, 3, model->max_size()};
    std::mt19937 rng(args.seed);
    for (int64_t s : sizes) {
      InputSet set{{}, s};
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
    for (const InputSet& set : sets) KILN_RETURN_IF_ERROR(run_once(set.tensors, set.size));
    const ExecutorStats st = graphs->stats();
    fmt::print("summary: {} input set(s); graph replays {}, eager runs {}; reference {}\n",
               sets.size(), st.graph_replays, st.eager_runs,
               args.reference.empty() ? "not checked" : (all_ok ? "MATCH" : "MISMATCH"));
    return Status::ok_status();
  }
};

}  // namespace

int cmd_run(const RunArgs& a) {
  auto dir = cache::artifact_resolve(a.cache_dir);
  if (!dir.ok()) {
    fmt::print(stderr, "kiln run: {}\n", dir.status().message());
    return kExitError;
  }
  auto manifest = cache::manifest_read(*dir / std::string(cache::kManifestFileName));
  if (!manifest.ok()) {
    fmt::print(stderr, "kiln run: {}\n", manifest.status().message());
    return kExitError;
  }
  std::string why;
  if (!cuda_device_available(&why)) {
    fmt::print("kiln run: {}\nThe artifact {} is compiled; running it needs a CUDA GPU.\n", why,
               dir->string());
    return kExitNoGpu;
  }
  Runner r{a, precision_of(manifest->config().precision())};
  if (Status s = r.run_all(*dir, *manifest); !s.ok()) {
    fmt::print(stderr, "kiln run: {}\n", s.to_string());
    return kExitError;
  }
  return r.all_ok ? kExitOk : kExitMismatch;
}

}  // namespace kiln::tools
