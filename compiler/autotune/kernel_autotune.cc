#include "compiler/autotune/kernel_autotune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <random>

#include "cache/file_hash.h"
#include "compiler/autotune/graph_timer.h"
#include "compiler/autotune/operand_fill.h"
#include "compiler/autotune/output_agreement.h"
#include "compiler/autotune/tune_session.h"
#include "compiler/autotune/tuning_db.h"
#include "compiler/backend/kernel_codegen.h"
#include "compiler/backend/lower/attention_codegen.h"
#include "compiler/backend/nvrtc_compile.h"
#include "compiler/log.h"
#include "compiler/progress.h"
#include "compiler/reference/reference_interpreter.h"
#include "runtime/cuda_check.h"

namespace kiln::compiler {
namespace {

constexpr double kWinMargin = 0.98;  // a candidate must be 2% faster than the default to win

// The name a kernel parameter declaration ends with ("const float* __restrict__ kpad": "kpad").
std::string_view declared_param_name(std::string_view decl) {
  size_t end = decl.size();
  while (end > 0 && decl[end - 1] == ' ') --end;
  size_t begin = end;
  while (begin > 0 &&
         (std::isalnum(static_cast<unsigned char>(decl[begin - 1])) != 0 || decl[begin - 1] == '_'))
    --begin;
  return decl.substr(begin, end - begin);
}

Result<int64_t> value_numel(const ir::Value& v, int64_t size) {
  int64_t n = 1;
  for (const ir::DimExpr& d : v.shape) {
    const int64_t e = d.eval(size);
    if (e < 0 || (e > 0 && n > (int64_t{1} << 40) / e))
      return invalid_argument(fmt::format("tensor '{}' {} has no valid size at {}", v.name,
                                          ir::shape_to_string(v.shape), size));
    n *= e;
  }
  return n;
}

Result<std::vector<double>> decode(const ir::Value& like, std::vector<uint8_t> bytes, int64_t n) {
  ir::Value v;
  v.name = like.name;
  v.dtype = like.dtype;
  v.shape = {ir::DimExpr::constant(n)};
  v.constant = ir::Constant{{n}, std::move(bytes)};
  KILN_ASSIGN_OR_RETURN(RefTensor t, reference_decode_constant(v));
  return std::move(t.data);
}

// Launches of `program` with candidates, grouped by their default kernel (first-seen order).
// A launch that reads the KV cache cannot be timed alone: its candidates (the paged decode's
// split configurations) come decided by the lowering and are left as they are.
struct Group {
  std::string symbol;
  std::vector<KernelLaunch*> launches;
};
std::vector<Group> tunable_groups(LoweredProgram& program) {
  std::vector<Group> out;
  std::map<std::string, size_t> index;
  for (auto& step : program.steps) {
    auto* l = std::get_if<KernelLaunch>(&step);
    if (l == nullptr || l->candidates.empty()) continue;
    if (std::any_of(l->args.begin(), l->args.end(),
                    [](const KernelArgRef& a) { return a.kind == KernelArgRef::Kind::kKv; }))
      continue;
    const std::string& symbol = program.kernels[static_cast<size_t>(l->kernel)].symbol;
    auto [it, fresh] = index.emplace(symbol, out.size());
    if (fresh) out.push_back({symbol, {}});
    out[it->second].launches.push_back(l);
  }
  return out;
}

// Records the configuration named `config` as the decision at `size` for every launch of the
// group that has it (a launch whose candidates changed since the decision keeps its default).
void decide(const Group& grp, int64_t size, const std::string& config, const std::string& source,
            double ms, double default_ms) {
  for (KernelLaunch* l : grp.launches) {
    int which = -2;
    if (config == l->config) which = -1;
    for (size_t c = 0; c < l->candidates.size() && which == -2; ++c)
      if (l->candidates[c].config == config) which = static_cast<int>(c);
    if (which == -2) continue;
    l->tuned[size] = TunedChoice{which, source, ms, default_ms};
  }
}

// NVRTC-compiles each group's bench module (groups[i] at sizes[i]) for `arch`, on as many
// threads as there are cores.
std::vector<Result<std::vector<uint8_t>>> compile_benches(
    const LoweredProgram& program, const std::vector<Group>& groups,
    const std::vector<std::vector<int64_t>>& sizes, const std::string& arch) {
  std::vector<NvrtcModule> modules;
  for (size_t i = 0; i < groups.size(); ++i)
    modules.push_back({fmt::format("tune_{}", groups[i].symbol),
                       launch_bench_source(program, *groups[i].launches[0], sizes[i]),
                       kernel_headers()});
  return nvrtc_compile_each(modules, arch);
}

}  // namespace

std::string launch_bench_source(const LoweredProgram& program, const KernelLaunch& launch,
                                const std::vector<int64_t>& sizes) {
  const KernelDef& def = program.kernels[static_cast<size_t>(launch.kernel)];
  std::vector<SizedKernel> sized = {{def, sizes}};
  for (const LaunchCandidate& c : launch.candidates) {
    sized.push_back({c.def, sizes});
    sized.back().def.symbol = candidate_symbol(def, c);
  }
  return codegen_module_source({}, {}, sized);
}

int force_kernel_candidate(LoweredProgram& program, const std::vector<int64_t>& sizes, int n) {
  int changed = 0;
  for (auto& step : program.steps) {
    auto* l = std::get_if<KernelLaunch>(&step);
    if (l == nullptr || n < 0 || static_cast<int>(l->candidates.size()) <= n) continue;
    for (int64_t s : sizes) l->tuned[s] = TunedChoice{n, "forced", 0, 0};
    changed += sizes.empty() ? 0 : 1;
  }
  return changed;
}

std::vector<LaunchOperand> launch_operands(const KernelDef& def, const KernelLaunch& launch) {
  std::vector<LaunchOperand> out;
  for (size_t j = 0; j < launch.args.size(); ++j) {
    const KernelArgRef& a = launch.args[j];
    if (a.kind != KernelArgRef::Kind::kValue) continue;
    const bool key_padding =
        j < def.params.size() && declared_param_name(def.params[j]) == kAttnKeyPaddingParam;
    auto seen = std::find_if(out.begin(), out.end(),
                             [&](const LaunchOperand& o) { return o.value == a.value; });
    if (seen == out.end()) seen = out.insert(out.end(), LaunchOperand{a.value, false});
    seen->ones = seen->ones || key_padding;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// LaunchBench

Result<std::unique_ptr<LaunchBench>> LaunchBench::create(const ir::Graph& g,
                                                         const LoweredProgram& program,
                                                         const KernelLaunch& launch, int64_t size,
                                                         const std::vector<uint8_t>& cubin) {
  std::unique_ptr<LaunchBench> b(new LaunchBench());
  b->launch_ = &launch;
  b->g_ = &g;
  b->size_ = size;
  const KernelDef& def = program.kernels[static_cast<size_t>(launch.kernel)];
  KILN_CUDA_TRY(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  KILN_CUDA_TRY(
      cudaLibraryLoadData(&b->lib_, cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
      "loading the tuning module of " + def.symbol);

  auto add_config = [&](const std::string& symbol, const ir::DimExpr& work, uint32_t per_block,
                        const ir::DimExpr& grid_y, uint32_t block, uint32_t shared) -> Status {
    Config c;
    const std::string entry = specialised_symbol(symbol, size);
    KILN_CUDA_TRY(cudaLibraryGetKernel(&c.fn, b->lib_, entry.c_str()), "kernel " + entry);
    const int64_t w = work.eval(size);
    c.blocks = w <= 0 ? 0 : (w - 1) / std::max<uint32_t>(per_block, 1) + 1;
    c.blocks_y = grid_y.eval(size);
    c.block = block;
    c.shared = shared;
    if (c.blocks > INT32_MAX || c.blocks_y < 1 || c.blocks_y > 65535 || block < 1 || block > 1024)
      return invalid_argument(fmt::format("{}: grid {}x{} block {} is not launchable", entry,
                                          c.blocks, c.blocks_y, block));
    const void* fn = reinterpret_cast<const void*>(c.fn);
    cudaFuncAttributes attr{};
    KILN_CUDA_TRY(cudaFuncGetAttributes(&attr, fn), "attributes of " + entry);
    if (static_cast<int>(block) > attr.maxThreadsPerBlock)
      return invalid_argument(fmt::format("{} allows {} threads per block, the launch has {}",
                                          entry, attr.maxThreadsPerBlock, block));
    if (shared > 48 * 1024)
      KILN_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared)),
                    fmt::format("{} with {} bytes of shared memory", entry, shared));
    b->configs_.push_back(c);
    return Status::ok_status();
  };
  KILN_RETURN_IF_ERROR(add_config(def.symbol, launch.work, launch.work_per_block, launch.grid_y,
                                  launch.block, launch.shared_bytes));
  for (const LaunchCandidate& c : launch.candidates) {
    Status st = add_config(candidate_symbol(def, c), c.work, c.work_per_block, c.grid_y, c.block,
                           c.shared_bytes);
    if (!st.ok()) {  // unusable here: timing it reports why
      (void)cudaGetLastError();
      b->configs_.push_back(Config{});
    }
  }

  // A tuning run is a request of exactly `size`: the real size equals the padded one.
  for (const KernelArgRef& a : launch.args) {
    if (a.kind != KernelArgRef::Kind::kRealSize || b->real_size_ != nullptr) continue;
    void* p = nullptr;
    KILN_CUDA_TRY(cudaMalloc(&p, sizeof(int64_t)), "the real-size slot");
    b->real_size_ = static_cast<int64_t*>(p);
    KILN_CUDA_TRY(cudaMemcpy(p, &size, sizeof(int64_t), cudaMemcpyHostToDevice),
                  "writing the real size");
  }

  // Operands: every distinct value the arguments name, a few sets of them.
  const std::vector<LaunchOperand> operands = launch_operands(def, launch);
  uint64_t set_bytes = 0;
  std::vector<int64_t> numel;
  for (const LaunchOperand& o : operands) {
    const ir::Value& v = g.values[static_cast<size_t>(o.value)];
    KILN_ASSIGN_OR_RETURN(int64_t n, value_numel(v, size));
    b->values_.push_back(o.value);
    numel.push_back(n);
    set_bytes += (static_cast<uint64_t>(n) * dtype_size(v.dtype) + 255) / 256 * 256;
  }
  const int sets =
      static_cast<int>(std::clamp<uint64_t>(kMaxOperandSetBytes / std::max<uint64_t>(set_bytes, 1),
                                            1, static_cast<uint64_t>(kOperandSets)));
  std::mt19937 rng(static_cast<uint32_t>(cache::hash64(def.symbol.data(), def.symbol.size()) +
                                         static_cast<uint64_t>(size)));
  for (int s = 0; s < sets; ++s) {
    b->sets_.emplace_back();
    for (size_t i = 0; i < b->values_.size(); ++i) {
      const ir::Value& v = g.values[static_cast<size_t>(b->values_[i])];
      std::vector<uint8_t> bytes = operands[i].ones ? autotune_ones_bytes(v.dtype, numel[i])
                                                    : autotune_random_bytes(v.dtype, numel[i], rng);
      void* p = nullptr;
      KILN_CUDA_TRY(cudaMalloc(&p, std::max<size_t>(bytes.size(), 256)), "operand " + v.name);
      b->sets_.back().push_back(p);
      KILN_CUDA_TRY(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                    "filling " + v.name);
      if (s == 0) b->init_.push_back(std::move(bytes));
    }
  }
  return b;
}

LaunchBench::~LaunchBench() {
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  for (auto& set : sets_)
    for (void* p : set) (void)cudaFree(p);
  if (real_size_ != nullptr) (void)cudaFree(real_size_);
  if (lib_ != nullptr) (void)cudaLibraryUnload(lib_);
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Status LaunchBench::launch(int which, int set) {
  const Config& c = configs_[static_cast<size_t>(which + 1)];
  if (c.fn == nullptr) return failed_precondition("the configuration cannot be loaded or launched");
  if (c.blocks == 0) return Status::ok_status();
  union Slot {
    void* ptr;
    int64_t i64;
    float f32;
  };
  std::vector<Slot> slots(launch_->args.size());
  std::vector<void*> args(launch_->args.size());
  for (size_t j = 0; j < launch_->args.size(); ++j) {
    const KernelArgRef& a = launch_->args[j];
    switch (a.kind) {
      case KernelArgRef::Kind::kValue: {
        const auto at = std::find(values_.begin(), values_.end(), a.value) - values_.begin();
        slots[j].ptr = sets_[static_cast<size_t>(set)][static_cast<size_t>(at)];
        break;
      }
      case KernelArgRef::Kind::kSize: slots[j].i64 = size_; break;
      case KernelArgRef::Kind::kRealSize: slots[j].ptr = real_size_; break;
      case KernelArgRef::Kind::kI64: slots[j].i64 = a.i64; break;
      case KernelArgRef::Kind::kF32: slots[j].f32 = a.f32; break;
      case KernelArgRef::Kind::kKv:  // never timed: tunable_groups leaves these launches out
        return failed_precondition("a launch reading the KV cache cannot be timed alone");
    }
    args[j] = &slots[j];
  }
  const dim3 grid(static_cast<unsigned>(c.blocks), static_cast<unsigned>(c.blocks_y));
  return runtime::cuda_status(cudaLaunchKernel(reinterpret_cast<const void*>(c.fn), grid,
                                               dim3(c.block), args.data(), c.shared, stream_),
                              "launch");
}

Result<double> LaunchBench::time(int which) {
  const int sets = static_cast<int>(sets_.size());
  return graph_median_ms(stream_, sets, [&](int calls) -> Status {
    for (int c = 0; c < calls; ++c) KILN_RETURN_IF_ERROR(launch(which, c % sets));
    return Status::ok_status();
  });
}

Result<std::string> LaunchBench::differs_from_default(int which) {
  // Every buffer the launch names: outputs must agree, and inputs must be left as they were.
  std::vector<size_t> outs;
  for (size_t j = 0; j < launch_->args.size(); ++j) {
    const KernelArgRef& a = launch_->args[j];
    if (a.kind != KernelArgRef::Kind::kValue) continue;
    const auto at = static_cast<size_t>(std::find(values_.begin(), values_.end(), a.value) -
                                        values_.begin());
    if (std::find(outs.begin(), outs.end(), at) == outs.end()) outs.push_back(at);
  }
  auto run = [&](int w) -> Result<std::vector<std::vector<uint8_t>>> {
    for (size_t i = 0; i < values_.size(); ++i)
      KILN_CUDA_TRY(cudaMemcpyAsync(sets_[0][i], init_[i].data(), init_[i].size(),
                                    cudaMemcpyHostToDevice, stream_),
                    "restoring operands");
    KILN_RETURN_IF_ERROR(launch(w, 0));
    std::vector<std::vector<uint8_t>> got;
    for (size_t i : outs) {
      got.emplace_back(init_[i].size());
      KILN_CUDA_TRY(cudaMemcpyAsync(got.back().data(), sets_[0][i], got.back().size(),
                                    cudaMemcpyDeviceToHost, stream_),
                    "reading outputs");
    }
    KILN_CUDA_TRY(cudaStreamSynchronize(stream_), "running");
    return got;
  };
  KILN_ASSIGN_OR_RETURN(auto want, run(-1));
  KILN_ASSIGN_OR_RETURN(auto got, run(which));
  for (size_t o = 0; o < outs.size(); ++o) {
    if (got[o] == want[o]) continue;
    const ir::Value& v = g_->values[static_cast<size_t>(values_[outs[o]])];
    const auto n = static_cast<int64_t>(want[o].size() / std::max<size_t>(dtype_size(v.dtype), 1));
    KILN_ASSIGN_OR_RETURN(auto a, decode(v, std::move(got[o]), n));
    KILN_ASSIGN_OR_RETURN(auto b, decode(v, std::move(want[o]), n));
    const int64_t i = first_disagreement(a, b, output_tolerance(v.dtype));
    if (i >= 0)
      return fmt::format("'{}' element {}: {} against the default's {}", v.name, i, a[i], b[i]);
  }
  return std::string();
}

// ---------------------------------------------------------------------------------------------
// The tuner

namespace {

using Warn = std::function<void(const std::string&)>;

// The outcome of timing a launch's candidates against its default.
struct Pick {
  int which = -1;  // the winning candidate; -1: the default stays
  double ms = 0;   // the winner's time
  int timed = 1;   // configurations that ran (the default and the candidates not rejected)
};

// One pass over the launch groups of a program at the compile sizes.
struct KernelPass {
  const ir::Graph& g;
  const LoweredProgram& program;
  TuneSession& session;
  KernelAutotuneReport& rep;

  std::vector<std::pair<size_t, int64_t>> decide_from_db(const std::vector<Group>& groups,
                                                         const std::vector<int64_t>& sizes);
  std::string time(const Group& grp, int64_t s, const Result<std::vector<uint8_t>>& cubin);
  Pick best_candidate(LaunchBench& bench, const KernelLaunch& l, double default_ms,
                      const Warn& warn);
};

// Decides what the database has; returns the (group, size) pairs left to time.
std::vector<std::pair<size_t, int64_t>> KernelPass::decide_from_db(
    const std::vector<Group>& groups, const std::vector<int64_t>& sizes) {
  std::vector<std::pair<size_t, int64_t>> misses;
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto& gate = groups[i].launches[0]->run_sizes;  // a gated launch: only where it runs
    for (int64_t s : sizes) {
      if (gate && std::find(gate->begin(), gate->end(), s) == gate->end()) continue;
      ++rep.decisions;
      const KernelTuningKey key{session.arch(), groups[i].symbol, s};
      if (const KernelTuningEntry* hit = session.db().find(key)) {
        decide(groups[i], s, hit->config, "tuning-db", hit->ms, hit->default_ms);
        ++rep.from_db;
      } else {
        misses.emplace_back(i, s);
      }
    }
  }
  return misses;
}

// The fastest candidate of `l` that agrees with the default and beats it by the margin; one that
// fails to run or disagrees is rejected, with a warning.
Pick KernelPass::best_candidate(LaunchBench& bench, const KernelLaunch& l, double default_ms,
                                const Warn& warn) {
  Pick pick{-1, default_ms, 1};
  for (int c = 0; c < static_cast<int>(l.candidates.size()); ++c) {
    const std::string& name = l.candidates[static_cast<size_t>(c)].config;
    auto diff = bench.differs_from_default(c);
    if (!diff.ok() || !diff->empty()) {
      ++rep.rejected;
      warn(fmt::format("candidate '{}' rejected: {}", name,
                       diff.ok() ? "its output differs: " + *diff : diff.status().message()));
      continue;
    }
    auto ms = bench.time(c);
    if (!ms.ok()) {
      ++rep.rejected;
      warn(fmt::format("candidate '{}' rejected: {}", name, ms.status().message()));
      continue;
    }
    ++pick.timed;
    if (*ms < pick.ms && *ms < kWinMargin * default_ms) {
      pick.which = c;
      pick.ms = *ms;
    }
  }
  return pick;
}

// Times the default and the candidates of group `grp` at size `s` and records the decision; a
// failure leaves the default, with a warning. Returns the progress line's detail.
std::string KernelPass::time(const Group& grp, int64_t s,
                             const Result<std::vector<uint8_t>>& cubin) {
  const KernelLaunch& l = *grp.launches[0];
  auto warn = [&](const std::string& what) {
    logger().warn("kiln: autotune: kernel {} ({}) at size {}: {}", grp.symbol, l.nodes, s, what);
  };
  if (!cubin.ok()) {
    warn("the tuning module does not compile; keeping the default: " + cubin.status().message());
    rep.rejected += static_cast<int>(l.candidates.size());
    return fmt::format("kernel {} size {}: kept the default", grp.symbol, s);
  }
  auto bench = LaunchBench::create(g, program, l, s, *cubin);
  if (!bench.ok()) {
    warn("cannot be benchmarked; keeping the default: " + bench.status().message());
    return fmt::format("kernel {} size {}: kept the default", grp.symbol, s);
  }
  auto default_ms = (*bench)->time(-1);
  if (!default_ms.ok()) {
    warn("the default does not run; keeping it: " + default_ms.status().message());
    return fmt::format("kernel {} size {}: kept the default", grp.symbol, s);
  }
  const Pick pick = best_candidate(**bench, l, *default_ms, warn);
  ++rep.timed;
  rep.improved += pick.which >= 0 ? 1 : 0;
  const std::string& winner =
      pick.which >= 0 ? l.candidates[static_cast<size_t>(pick.which)].config : l.config;
  decide(grp, s, winner, "autotune", pick.ms, *default_ms);
  session.db().put(KernelTuningKey{session.arch(), grp.symbol, s},
                   KernelTuningEntry{winner, pick.ms, *default_ms});
  return fmt::format(
      "kernel {} ({}) size {}: {} configs, best '{}' {:.4f} ms (default '{}' {:.4f} ms)",
      grp.symbol, l.nodes, s, pick.timed, winner, pick.ms, l.config, *default_ms);
}

Status tune_kernels(const AutotuneOptions& options, const ir::Graph& g,
                    const std::vector<int64_t>& sizes, const std::vector<std::string>& targets,
                    LoweredProgram& program, KernelAutotuneReport& rep) {
  if (options.mode == AutotuneMode::kOff) {
    rep.skipped = "autotune is off";
    return Status::ok_status();
  }
  std::vector<Group> groups = tunable_groups(program);
  if (groups.empty() || sizes.empty() || targets.empty()) {
    rep.skipped = groups.empty() ? "no kernel launch has candidates" : "no compile sizes";
    return Status::ok_status();
  }
  KILN_ASSIGN_OR_RETURN(TuneSession session, TuneSession::open(options, targets, "kernels"));
  rep.skipped = session.skipped();
  KernelPass pass{g, program, session, rep};
  const auto misses = pass.decide_from_db(groups, sizes);
  if (!session.gpu() || misses.empty() || session.budget_spent()) {
    rep.over_budget = session.gpu() ? static_cast<int>(misses.size()) : 0;
    return session.close(&rep.seconds);
  }
  // In two rounds, so that the budget goes first to the (launch, size) pairs that also decide a
  // skinny GEMM against cuBLASLt (launch_decides_route): on a large model it may not reach the
  // rest (the Llama 0.85B's decode program at 7 compile sizes, with autotune.budget_s 120,
  // timed 4 of 102 (kernel, size) pairs, all the embedding gather's, so every skinny GEMM above
  // 4 rows ran on cuBLASLt untimed). Each round compiles one tuning module per group with
  // misses, for the sizes it times there, in parallel, then times them. (The Llama without a KV
  // cache at 1 / 128 / 512 tokens, autotune.budget_s 45: when the first round took its norm and
  // gating kernels at every size, its modules took 25 s of the 22 s kernel share, and the
  // attention at 128 and 512 tokens kept its default tiles.)
  const std::vector<int64_t> route_sizes = route_decision_sizes(program);
  Progress progress("autotune kernels", static_cast<int>(misses.size()));
  for (const bool route : {true, false}) {
    std::vector<Group> to_compile;
    std::vector<std::vector<int64_t>> compile_sizes;
    std::vector<size_t> compiled_index(groups.size(), SIZE_MAX);
    std::vector<std::pair<size_t, int64_t>> round;
    for (const auto& [i, s] : misses) {
      if (launch_decides_route(*groups[i].launches[0], s, route_sizes) != route) continue;
      round.emplace_back(i, s);
      if (compiled_index[i] == SIZE_MAX) {
        compiled_index[i] = to_compile.size();
        to_compile.push_back(groups[i]);
        compile_sizes.emplace_back();
      }
      compile_sizes[compiled_index[i]].push_back(s);
    }
    if (round.empty()) continue;
    std::vector<Result<std::vector<uint8_t>>> cubins;
    if (!session.budget_spent()) {
      logger().info("kiln: compiling {} kernel tuning modules ({} (kernel, size) pairs{})",
                    to_compile.size(), round.size(),
                    route ? ", those deciding skinny GEMMs against cuBLASLt" : "");
      const double start = session.elapsed();
      cubins = compile_benches(program, to_compile, compile_sizes, session.arch());
      logger().info(
          "kiln: tuning modules compiled in {:.1f} s, {:.1f} s of the {:.0f} s budget spent",
          session.elapsed() - start, session.elapsed(), options.budget_s);
    }
    for (const auto& [i, s] : round) {
      if (session.over_budget("kernels keep their default launch configuration")) {
        ++rep.over_budget;
        progress.step("over the budget: default kept", /*log_line=*/false);
        continue;
      }
      progress.step(pass.time(groups[i], s, cubins[compiled_index[i]]));
    }
  }
  return session.close(&rep.seconds);
}

}  // namespace

std::vector<int64_t> route_decision_sizes(const LoweredProgram& program) {
  std::vector<int64_t> out;
  for (const auto& step : program.steps)
    if (const auto* l = std::get_if<KernelLaunch>(&step); l != nullptr && l->run_sizes)
      out.insert(out.end(), l->run_sizes->begin(), l->run_sizes->end());
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

bool launch_decides_route(const KernelLaunch& l, int64_t size,
                          const std::vector<int64_t>& route_sizes) {
  return (l.run_sizes.has_value() || l.before_cublaslt || l.after_cublaslt) &&
         std::binary_search(route_sizes.begin(), route_sizes.end(), size);
}

Status autotune_kernels(const AutotuneOptions& options, const ir::Graph& g,
                        const std::vector<int64_t>& sizes, const std::vector<std::string>& targets,
                        LoweredProgram& program, KernelAutotuneReport* report) {
  KernelAutotuneReport local;
  KernelAutotuneReport& rep = report != nullptr ? *report : local;
  rep = KernelAutotuneReport{};
  Status st = tune_kernels(options, g, sizes, targets, program, rep);
  logger().debug(
      "kiln: autotune: kernels: {} (kernel, size) decisions, {} timed, {} from the tuning "
      "database, {} improved, {} over the budget, {} candidates rejected, {:.1f} s{}",
      rep.decisions, rep.timed, rep.from_db, rep.improved, rep.over_budget, rep.rejected,
      rep.seconds, rep.skipped.empty() ? "" : "; not timed: " + rep.skipped);
  return st;
}

}  // namespace kiln::compiler
