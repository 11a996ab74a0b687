// kiln generate CACHE_DIR: token generation over a model compiled for generation (`kv_cache:`)
// through kiln::Generator — one prompt (--prompt-ids) or a ragged batch of them (--prompts FILE),
// printing the tokens, the timings of GenerationResult, the graph mode and the KV cache; or,
// with --bench-decode, the decode-step latency per graph mode and batch (Generator::
// time_decode_step). Everything that can be checked without a GPU — the arguments, the
// artifact's generation section, prompt ids against its vocabulary, lengths against
// max_seq_len (generate_request.h) — is checked before the GPU is looked for.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_layout.h"
#include "cache/manifest_io.h"
#include "kiln/generator.h"
#include "kiln/model.h"
#include "tools/commands.h"
#include "tools/generate_request.h"
#include "tools/runtime_progress.h"

namespace kiln::tools {
namespace {

using nlohmann::json;

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

json kv_json(const KvCacheInfo& i) {
  return {{"num_blocks", i.num_blocks},
          {"free_blocks", i.free_blocks},
          {"block_size", i.block_size},
          {"max_sequences", i.max_sequences},
          {"max_seq_len", i.max_seq_len},
          {"live_sequences", i.live_sequences},
          {"bytes", i.bytes}};
}

// The generator's line (model, mode, vocabulary; the downgrade reason if any) and its KV cache's.
// To stderr with --json, which keeps stdout one JSON document.
void print_generator(const Model& m, const Generator& g, bool json_out) {
  std::FILE* to = json_out ? stderr : stdout;
  fmt::print(to, "{} ({}): mode {}, vocabulary {}\n", m.name(), m.artifact_dir().string(),
             cuda_graph_mode_name(g.mode()), g.vocab_size());
  if (!g.downgrade_reason().empty()) fmt::print(to, "  {}\n", g.downgrade_reason());
  const KvCacheInfo i = g.kv_cache_info();
  fmt::print(
      to, "KV cache: {} blocks of {} tokens ({} free), {} sequences of at most {} tokens, {}\n",
      i.num_blocks, i.block_size, i.free_blocks, i.max_sequences, i.max_seq_len, mib(i.bytes));
}

Result<std::unique_ptr<Generator>> generator_for(std::shared_ptr<const Model> model,
                                                 std::optional<CudaGraphMode> mode) {
  GeneratorOptions o;
  o.mode = mode;
  o.capture_progress = capture_progress_bar();
  return Generator::create(std::move(model), o);
}

Status generate(const GenerateArgs& a, const GenerateRequest& r,
                std::shared_ptr<const Model> model) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Generator> g, generator_for(model, r.modes.front()));
  print_generator(*model, *g, a.json);
  KILN_ASSIGN_OR_RETURN(GenerationResult res, g->generate(r.prompts, r.sequence));
  json prompts = json::array();
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    prompts.push_back({{"prompt", r.prompts[p]}, {"tokens", res.tokens[p]}});
    if (!a.json)
      fmt::print("prompt {} ({} tokens) → {} tokens: {}\n", p, r.prompts[p].size(),
                 res.tokens[p].size(), fmt::join(res.tokens[p], " "));
  }
  if (!a.json) {
    fmt::print(
        "time to first token {:.3f} ms, time per output token {:.3f} ms, {:.1f} tokens/s ({} "
        "decode steps)\n",
        res.time_to_first_token_ms, res.time_per_output_token_ms, res.tokens_per_second,
        res.decode_steps);
    return Status::ok_status();
  }
  const json out = {{"model", model->name()},
                    {"mode", cuda_graph_mode_name(g->mode())},
                    {"downgrade_reason", g->downgrade_reason()},
                    {"kv_cache", kv_json(g->kv_cache_info())},
                    {"prompts", prompts},
                    {"time_to_first_token_ms", res.time_to_first_token_ms},
                    {"time_per_output_token_ms", res.time_per_output_token_ms},
                    {"tokens_per_second", res.tokens_per_second},
                    {"decode_steps", res.decode_steps}};
  fmt::print("{}\n", out.dump(2));
  return Status::ok_status();
}

Status bench_decode(const GenerateArgs& a, const GenerateRequest& r,
                    std::shared_ptr<const Model> model, const schema::Manifest& m) {
  std::vector<int64_t> batches = a.batches;
  if (batches.empty()) batches = {1, 8, 32, 64};
  json results = json::array();
  if (!a.json)
    fmt::print(
        "decode step at context {}: median of {} steps (device events); programmatic "
        "launch {}\n",
        a.context, a.iters, model->load_report().programmatic_launch ? "on" : "off");
  for (const std::optional<CudaGraphMode>& mode : r.modes) {
    KILN_ASSIGN_OR_RETURN(std::unique_ptr<Generator> g, generator_for(model, mode));
    print_generator(*model, *g, a.json);
    const std::string name = cuda_graph_mode_name(g->mode());
    for (int64_t batch : batches) {
      std::string skipped =
          decode_misfit(g->kv_cache_info(), decode_rows(m), batch, a.context, a.iters);
      double ms = 0;
      if (skipped.empty()) {
        Result<double> t = g->time_decode_step(batch, a.context, a.iters);
        if (t.ok()) {
          ms = *t;
        } else if (t.status().code() == StatusCode::kResourceExhausted) {
          skipped = t.status().message();
        } else {
          return t.status().with_context(fmt::format("mode {}, batch {}", name, batch));
        }
      }
      if (!skipped.empty()) {
        results.push_back({{"mode", name}, {"batch", batch}, {"skipped", skipped}});
        if (!a.json) fmt::print("  {:<18} batch {:>4}: skipped: {}\n", name, batch, skipped);
        continue;
      }
      const double tps = ms > 0 ? static_cast<double>(batch) * 1000.0 / ms : 0.0;
      results.push_back({{"mode", name}, {"batch", batch}, {"ms", ms}, {"tokens_per_s", tps}});
      if (!a.json)
        fmt::print("  {:<18} batch {:>4}: {:9.4f} ms  {:12.1f} tokens/s\n", name, batch, ms, tps);
    }
  }
  if (a.json) {
    const json out = {{"model", model->name()},
                      {"context", a.context},
                      {"programmatic_launch", model->load_report().programmatic_launch},
                      {"results", results}};
    fmt::print("{}\n", out.dump(2));
  }
  return Status::ok_status();
}

}  // namespace

int cmd_generate(const GenerateArgs& a) {
  const auto fail = [](const Status& s, int code) {
    fmt::print(stderr, "kiln generate: {}\n", s.to_string());
    return code;
  };
  Result<GenerateRequest> request = generate_request_parse(a);
  if (!request.ok()) return fail(request.status(), kExitUsage);
  auto dir = cache::artifact_resolve(a.cache_dir);
  if (!dir.ok()) return fail(dir.status(), kExitError);
  auto manifest = cache::manifest_read(*dir / std::string(cache::kManifestFileName));
  if (!manifest.ok()) return fail(manifest.status(), kExitError);
  if (!manifest->has_generation())
    return fail(invalid_argument(fmt::format(
                    "model '{}' ({}) was not compiled for generation: its manifest has no "
                    "generation section (compile a KV-cache decoder export with a `kv_cache:` "
                    "section in its config)",
                    manifest->model_name(), dir->string())),
                kExitError);
  if (Status s = generate_request_check(*request, *manifest); !s.ok()) return fail(s, kExitUsage);
  std::string why;
  if (!cuda_device_available(&why)) {
    fmt::print(
        "kiln generate: {}\nThe artifact {} is compiled for generation; generating needs a "
        "CUDA GPU.\n",
        why, dir->string());
    return kExitNoGpu;
  }
  LoadOptions lo;
  lo.upload_progress = upload_progress_bar();
  auto model = Model::load(*dir, lo);
  if (!model.ok()) return fail(model.status(), kExitError);
  const Status s =
      a.bench_decode ? bench_decode(a, *request, *model, *manifest) : generate(a, *request, *model);
  return s.ok() ? kExitOk : fail(s, kExitError);
}

}  // namespace kiln::tools
