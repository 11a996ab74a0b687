// GPU: LLM generation end to end — the KV-cache exports in tests/models/kv (GPT-2 and Llama with
// GQA, TorchScript and dynamo) compiled for generation (`kv_cache:`), loaded, and generated
// through kiln::Generator, against greedy.json: onnxruntime's greedy loop over the same ONNX model
// (32 new tokens for two prompts, with every step's logits).
//  - fp32: exactly onnxruntime's tokens, and each step's logits within the fp32 end-to-end
//    tolerance (tests/README.md), in every graph mode (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY,
//    FULL_AND_PIECEWISE).
//  - fp16: the fp32 tokens for as long as onnxruntime's top-2 logit margin stays large.
//  - A ragged batch of 8 prompts of different lengths: each sequence gets the tokens it gets
//    alone.
//  - Cache stress: 1,000 sequences of random lengths through a cache of 64 sequences — every
//    block returns, and every sequence's tokens equal its tokens alone.
//  - Errors: a full cache and max_seq_len fail cleanly and change nothing.
//  - Programmatic dependent launch changes no token and no logit bit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "kiln/generator.h"
#include "kiln/model.h"
#include "onnx/onnx_pb.h"
#include "tests/support/greedy_reference.h"
#include "tests/support/source_root.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// With position_ids, and without (kiln adds the input and feeds the model's position Range).
const std::vector<std::string> kModels = {
    "gpt2_ts17_kv", "gpt2_dynamo18_kv", "llama_ts17_kv", "llama_dynamo18_kv", "gpt2_ts17_kv_nopos",
    "gpt2_dynamo18_kv_nopos", "llama_ts17_kv_nopos", "llama_dynamo18_kv_nopos",
    // dynamo at opset 23: ONNX Attention (and RotaryEmbedding for Llama)
    "gpt2_dynamo23_kv", "llama_dynamo23_kv", "gpt2_dynamo23_kv_nopos", "llama_dynamo23_kv_nopos",
    // com.microsoft GroupQueryAttention, both past/present layouts (make_gqa_kv_decoder.py)
    "gqa_ort_kv", "gqa_ort_kv_shared"};

fs::path kv_dir(const std::string& name) {
  return testing::source_root() / "tests/models/kv" / name;
}

using Reference = testing::GreedyReference;

std::vector<Reference> references(const std::string& name) {
  return testing::greedy_references(kv_dir(name) / "greedy.json");
}

// input_ids' [batch, sequence] dim names (the exporters name them differently).
std::pair<std::string, std::string> ids_dims(const fs::path& model) {
  std::ifstream in(model, std::ios::binary);
  onnx::ModelProto m;
  m.ParseFromIstream(&in);
  for (const auto& i : m.graph().input())
    if (i.name() == "input_ids")
      return {i.type().tensor_type().shape().dim(0).dim_param(),
              i.type().tensor_type().shape().dim(1).dim_param()};
  return {};
}

// Compiles `name` for generation into `cache` and loads it. `decode_append: auto`: decode steps
// of up to kv_cache's auto batch append in the attention (the decode route's fresh split
// kernel), larger ones through the append launch, so both routes' kernels run.
std::shared_ptr<Model> compile_and_load(const std::string& name, const std::string& precision,
                                        const fs::path& cache, int64_t max_sequences = 64,
                                        int64_t max_blocks = 1024, int level = 3,
                                        const std::string& compile_sizes = "") {
  const fs::path model = kv_dir(name) / "model.onnx";
  const auto [batch, seq] = ids_dims(model);
  const std::string yaml =
      "size_dim: " + seq + "\ndims: {" + batch + ": 1}\nmax_size: 64\nprecision: " + precision +
      "\ncompilation:\n  mode: FULL\n  cudagraph_capture_sizes: [1, 2, 4, 8, 16, 32, 64]\n" +
      (compile_sizes.empty() ? "" : "  compile_sizes: " + compile_sizes + "\n") +
      "  level: " + std::to_string(level) +
      "\n"
      "autotune: {enabled: off}\nkv_cache:\n  block_size: 16\n  max_blocks: " +
      std::to_string(max_blocks) + "\n  max_sequences: " + std::to_string(max_sequences) +
      "\n  max_seq_len: 256\n  decode_append: auto\n";
  auto config = compiler::config_parse(yaml, name + "/kiln.yaml");
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  if (!config.ok()) return nullptr;
  auto out = compiler::compile_model({model, *config, cache});
  EXPECT_TRUE(out.ok()) << name << ": " << out.status().to_string();
  if (!out.ok()) return nullptr;
  auto m = Model::load(out->artifact_dir);
  EXPECT_TRUE(m.ok()) << name << ": " << m.status().to_string();
  return m.ok() ? *m : nullptr;
}

#define REQUIRE_GPU()                                                            \
  do {                                                                           \
    std::string why;                                                             \
    if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

// Greedy generation of one prompt; every step's logits (the prefill's last position, then each
// decode step's) when `logits` is non-null.
std::vector<int64_t> greedy(Generator& g, SequenceId id, const std::vector<int64_t>& prompt,
                            int64_t n, std::vector<std::vector<float>>* logits = nullptr) {
  SequenceOptions o;
  o.max_new_tokens = n;
  EXPECT_TRUE(g.add(id, o).ok());
  std::vector<int64_t> out;
  auto first = g.prefill(id, prompt);
  EXPECT_TRUE(first.ok()) << first.status().to_string();
  if (!first.ok()) return out;
  out.push_back(first->token);
  if (logits) logits->push_back(first->logits);
  bool finished = first->finished;
  while (!finished) {
    const SequenceId ids[] = {id};
    auto step = g.decode(ids);
    EXPECT_TRUE(step.ok()) << step.status().to_string();
    if (!step.ok()) break;
    out.push_back(step->at(0).token);
    if (logits) logits->push_back(step->at(0).logits);
    finished = step->at(0).finished;
  }
  EXPECT_TRUE(g.free(id).ok());
  return out;
}

class Generation : public ::testing::TestWithParam<std::string> {};

TEST_P(Generation, Fp32MatchesOnnxruntimeInEveryMode) {
  REQUIRE_GPU();
  testing::TempDir cache;
  auto model = compile_and_load(GetParam(), "fp32", cache.path());
  ASSERT_NE(model, nullptr);
  const std::vector<Reference> refs = references(GetParam());
  ASSERT_EQ(refs.size(), 2u);
  for (CudaGraphMode mode : kCudaGraphModes) {
    GeneratorOptions go;
    go.mode = mode;
    go.return_logits = true;
    auto g = Generator::create(model, go);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ((*g)->mode(), mode) << (*g)->downgrade_reason();
    const int64_t free_at_start = (*g)->kv_cache_info().free_blocks;
    for (const Reference& r : refs) {
      std::vector<std::vector<float>> logits;
      const auto n = static_cast<int64_t>(r.tokens.size());
      const std::vector<int64_t> got = greedy(**g, 7, r.prompt, n, &logits);
      EXPECT_EQ(got, r.tokens) << GetParam() << " " << cuda_graph_mode_name(mode) << " prompt of "
                               << r.prompt.size();
      ASSERT_EQ(logits.size(), r.step_logits.size());
      for (size_t s = 0; s < logits.size(); ++s) {
        ASSERT_EQ(logits[s].size(), r.step_logits[s].size());
        double worst = 0;
        size_t bad = 0;
        for (size_t v = 0; v < logits[s].size(); ++v) {
          const double ref = r.step_logits[s][v];
          const double err = std::abs(logits[s][v] - ref) - (1e-5 + 1e-3 * std::abs(ref));
          if (err > worst) worst = err, bad = v;
        }
        EXPECT_LE(worst, 0.0) << GetParam() << " " << cuda_graph_mode_name(mode) << " step " << s
                              << ": logit " << bad << " is " << logits[s][bad] << ", onnxruntime "
                              << r.step_logits[s][bad];
      }
    }
    EXPECT_EQ((*g)->kv_cache_info().free_blocks, free_at_start);
    const GeneratorStats st = (*g)->stats();
    if (mode == CudaGraphMode::kNone) {
      EXPECT_EQ(st.graph_replays, 0);
    }
    if (has_full_cudagraphs(mode)) {
      EXPECT_GE(st.graph_replays, st.decode_steps);
    }
  }
}

// fp16 gives the fp32 (onnxruntime) tokens up to the first step where onnxruntime's top-2 margin
// falls below 0.05 (a margin fp16 rounding cannot flip), and at least the first 4 tokens.
TEST_P(Generation, Fp16AgreesWhereTheMarginIsLarge) {
  REQUIRE_GPU();
  testing::TempDir cache;
  auto model = compile_and_load(GetParam(), "fp16", cache.path());
  ASSERT_NE(model, nullptr);
  auto g = Generator::create(model);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  for (const Reference& r : references(GetParam())) {
    size_t safe = 0;
    for (; safe < r.step_logits.size(); ++safe) {
      std::vector<double> l = r.step_logits[safe];
      std::partial_sort(l.begin(), l.begin() + 2, l.end(), std::greater<>());
      if (l[0] - l[1] < 0.05) break;
    }
    const std::vector<int64_t> got =
        greedy(**g, 1, r.prompt, static_cast<int64_t>(r.tokens.size()));
    ASSERT_EQ(got.size(), r.tokens.size());
    for (size_t i = 0; i <= std::min(safe, got.size() - 1); ++i)
      EXPECT_EQ(got[i], r.tokens[i])
          << GetParam() << " fp16 token " << i << " (margins large up to " << safe << ")";
    std::printf("[ info     ] %s fp16: prompt of %zu, %zu tokens checked\n", GetParam().c_str(),
                r.prompt.size(), std::min(safe + 1, got.size()));
  }
}

// Programmatic dependent launch (on by default on sm_90+) only lets each kernel's launch overlap
// its predecessor: every token and every logit bit is what plain launches give, in a FULL graph
// and eagerly.
TEST_P(Generation, ProgrammaticLaunchChangesNoBit) {
  REQUIRE_GPU();
  testing::TempDir cache;
  auto on = compile_and_load(GetParam(), "fp16", cache.path());
  ASSERT_NE(on, nullptr);
  LoadOptions plain;
  plain.programmatic_launch = false;
  auto off = Model::load(cache.path(), plain);
  ASSERT_TRUE(off.ok()) << off.status().to_string();
  EXPECT_FALSE((*off)->load_report().programmatic_launch);
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  const char* env = std::getenv("KILN_PDL");
  const bool env_off = env != nullptr && std::string(env) == "0";
  EXPECT_EQ(on->load_report().programmatic_launch, major >= 9 && !env_off);
  const Reference r = references(GetParam()).at(0);
  for (CudaGraphMode mode : {CudaGraphMode::kFullDecodeOnly, CudaGraphMode::kNone}) {
    std::vector<std::vector<float>> logits[2];
    std::vector<int64_t> tokens[2];
    int which = 0;
    for (const auto& model : {on, *off}) {
      GeneratorOptions go;
      go.mode = mode;
      go.return_logits = true;
      auto g = Generator::create(model, go);
      ASSERT_TRUE(g.ok()) << g.status().to_string();
      tokens[which] = greedy(**g, 1, r.prompt, 16, &logits[which]);
      ++which;
    }
    EXPECT_EQ(tokens[0], tokens[1]) << GetParam() << " " << cuda_graph_mode_name(mode);
    ASSERT_EQ(logits[0].size(), logits[1].size());
    for (size_t i = 0; i < logits[0].size(); ++i)
      EXPECT_TRUE(logits[0][i] == logits[1][i])
          << GetParam() << " " << cuda_graph_mode_name(mode) << " step " << i;
  }
}

// 8 prompts of lengths 1..40 as one ragged batch: each sequence's tokens equal its tokens alone.
TEST_P(Generation, RaggedBatchEqualsEachAlone) {
  REQUIRE_GPU();
  testing::TempDir cache;
  auto model = compile_and_load(GetParam(), "fp32", cache.path());
  ASSERT_NE(model, nullptr);
  auto g = Generator::create(model);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const int64_t vocab = (*g)->vocab_size();
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t len : {1, 3, 5, 8, 13, 21, 34, 40}) {
    std::vector<int64_t> p;
    for (int64_t i = 0; i < len; ++i) p.push_back((17 * i + 5 * len + 3) % vocab);
    prompts.push_back(p);
  }
  SequenceOptions o;
  o.max_new_tokens = 12;
  auto batch = (*g)->generate(prompts, o);
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  ASSERT_EQ(batch->tokens.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = (*g)->generate({prompts[i]}, o);
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    EXPECT_EQ(batch->tokens[i], alone->tokens[0]) << GetParam() << " prompt " << i;
    EXPECT_EQ(batch->tokens[i].size(), 12u);
  }
  EXPECT_EQ((*g)->kv_cache_info().live_sequences, 0);
}

INSTANTIATE_TEST_SUITE_P(KvExports, Generation, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return info.param; });

// Kernels specialised for the decode batches (compile_sizes: the skinny GEMMs' CUDA-core form up
// to 4 rows, where general kernels take the tensor-core form from 3; cuBLASLt at 8), in fp16: a
// batch of 1, 2, 4 or 8 copies of a reference prompt gives every copy onnxruntime's tokens
// wherever the margins are large.
TEST(GenerationSpecialised, CompileSizesAgreeWhereTheMarginIsLarge) {
  REQUIRE_GPU();
  for (const std::string name : {"gpt2_ts17_kv", "llama_dynamo18_kv"}) {
    testing::TempDir cache;
    auto model = compile_and_load(name, "fp16", cache.path(), 64, 1024, 3, "[1, 2, 4, 8]");
    ASSERT_NE(model, nullptr);
    auto g = Generator::create(model);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    for (const Reference& r : references(name)) {
      size_t safe = 0;
      for (; safe < r.step_logits.size(); ++safe) {
        std::vector<double> l = r.step_logits[safe];
        std::partial_sort(l.begin(), l.begin() + 2, l.end(), std::greater<>());
        if (l[0] - l[1] < 0.05) break;
      }
      SequenceOptions o;
      o.max_new_tokens = static_cast<int64_t>(r.tokens.size());
      for (size_t copies : {1, 2, 4, 8}) {
        auto out = (*g)->generate(std::vector<std::vector<int64_t>>(copies, r.prompt), o);
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        ASSERT_EQ(out->tokens.size(), copies);
        for (size_t c = 0; c < copies; ++c) {
          ASSERT_EQ(out->tokens[c].size(), r.tokens.size());
          for (size_t i = 0; i <= std::min(safe, r.tokens.size() - 1); ++i)
            EXPECT_EQ(out->tokens[c][i], r.tokens[i])
                << name << " batch " << copies << " copy " << c << " token " << i;
        }
      }
      std::printf("[ info     ] %s fp16, compile_sizes: prompt of %zu, %zu tokens checked\n",
                  name.c_str(), r.prompt.size(), std::min(safe + 1, r.tokens.size()));
    }
  }
}

// Every compilation level generates onnxruntime's greedy tokens (FULL_AND_PIECEWISE: decode
// replays full graphs, prefill piecewise ones).
class GenerationLevel : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GenerationLevel, Fp32TokensMatchOnnxruntime) {
  REQUIRE_GPU();
  const auto& [name, level] = GetParam();
  testing::TempDir cache;
  auto model = compile_and_load(name, "fp32", cache.path(), 64, 1024, level);
  ASSERT_NE(model, nullptr);
  GeneratorOptions go;
  go.mode = CudaGraphMode::kFullAndPiecewise;
  auto g = Generator::create(model, go);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  for (const Reference& r : references(name))
    EXPECT_EQ(greedy(**g, 3, r.prompt, static_cast<int64_t>(r.tokens.size())), r.tokens)
        << name << " level " << level << " prompt of " << r.prompt.size();
}

INSTANTIATE_TEST_SUITE_P(Levels, GenerationLevel,
                         ::testing::Combine(::testing::Values("gpt2_ts17_kv", "llama_dynamo18_kv"),
                                            ::testing::Values(0, 1, 2)),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_O" +
                                  std::to_string(std::get<1>(info.param));
                         });

// Sampling: the same seed gives the same tokens; stop tokens end a sequence.
TEST(GenerationSampling, SeedsRepeatAndStopTokensStop) {
  REQUIRE_GPU();
  testing::TempDir cache;
  auto model = compile_and_load("llama_ts17_kv", "fp32", cache.path());
  ASSERT_NE(model, nullptr);
  auto g = Generator::create(model);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  SequenceOptions o;
  o.max_new_tokens = 16;
  o.sampling = {1.0f, 20, 0.9f, 1234};
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8}};
  auto a = (*g)->generate(prompts, o);
  auto b = (*g)->generate(prompts, o);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  o.sampling.seed = 99;
  auto c = (*g)->generate(prompts, o);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->tokens, c->tokens);  // 32 draws from a 20-token top-k: a different seed differs
  // The third token of a's first sequence as a stop token: that sequence ends there.
  o.sampling.seed = 1234;
  o.stop_tokens = {a->tokens[0][2]};
  auto d = (*g)->generate(prompts, o);
  ASSERT_TRUE(d.ok());
  const auto& first = d->tokens[0];
  ASSERT_LE(first.size(), 3u);
  EXPECT_EQ(first.back(), a->tokens[0][2]);
}

// A full cache and a too-long sequence: clean errors, nothing changed.
TEST(GenerationErrors, FullCacheAndMaxSeqLen) {
  REQUIRE_GPU();
  testing::TempDir cache;
  // 16 blocks of 16 tokens = 256 tokens, one max_seq_len sequence.
  auto model = compile_and_load("gpt2_ts17_kv", "fp32", cache.path(), 4, 16);
  ASSERT_NE(model, nullptr);
  auto g = Generator::create(model);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  SequenceOptions o;
  o.max_new_tokens = 4;
  ASSERT_TRUE((*g)->add(1, o).ok());
  ASSERT_TRUE((*g)->add(2, o).ok());
  const std::vector<int64_t> long_prompt(200, 3), short_prompt(100, 4), too_long(257, 5);
  ASSERT_TRUE((*g)->prefill(1, long_prompt).ok());
  const int64_t free_before = (*g)->kv_cache_info().free_blocks;
  auto full = (*g)->prefill(2, short_prompt);  // needs 7 blocks, 3 are free
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), StatusCode::kResourceExhausted) << full.status().to_string();
  EXPECT_NE(full.status().message().find("full"), std::string::npos) << full.status().message();
  EXPECT_EQ((*g)->kv_cache_info().free_blocks, free_before);
  auto too = (*g)->prefill(2, too_long);
  ASSERT_FALSE(too.ok());
  EXPECT_EQ(too.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(too.status().message().find("max_seq_len"), std::string::npos);
  EXPECT_EQ((*g)->kv_cache_info().free_blocks, free_before);
  // Sequence 1 still decodes; after freeing it, 2 fits.
  const SequenceId one[] = {1};
  EXPECT_TRUE((*g)->decode(one).ok());
  EXPECT_TRUE((*g)->free(1).ok());
  EXPECT_TRUE((*g)->prefill(2, short_prompt).ok());
  EXPECT_TRUE((*g)->free(2).ok());
  EXPECT_EQ((*g)->kv_cache_info().free_blocks, 16);
}

// 1,000 sequences of random prompt and output lengths through a cache of 64 sequences: added as
// slots free up, prefilled, decoded together in ragged batches, freed when done. Every block
// returns, and each sequence's tokens equal its tokens alone.
TEST(GenerationStress, ThousandSequencesThroughSixtyFour) {
  REQUIRE_GPU();
  testing::TempDir cache;
  auto model = compile_and_load("llama_dynamo18_kv", "fp32", cache.path(), 64, 640);
  ASSERT_NE(model, nullptr);
  auto g = Generator::create(model);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const int64_t vocab = (*g)->vocab_size();
  const int64_t free_at_start = (*g)->kv_cache_info().free_blocks;
  std::mt19937 rng(2026);
  struct Job {
    std::vector<int64_t> prompt;
    int64_t n = 0;
    std::vector<int64_t> got;
  };
  std::vector<Job> jobs(1000);
  for (Job& j : jobs) {
    j.prompt.resize(std::uniform_int_distribution<size_t>(1, 48)(rng));
    for (auto& t : j.prompt) t = std::uniform_int_distribution<int64_t>(0, vocab - 1)(rng);
    j.n = std::uniform_int_distribution<int64_t>(1, 12)(rng);
  }
  size_t next = 0;
  std::map<SequenceId, size_t> live;  // sequence id → job
  int64_t steps = 0;
  while (next < jobs.size() || !live.empty()) {
    while (next < jobs.size() && live.size() < 64) {
      SequenceOptions o;
      o.max_new_tokens = jobs[next].n;
      const auto id = static_cast<SequenceId>(next);
      ASSERT_TRUE((*g)->add(id, o).ok());
      auto t = (*g)->prefill(id, jobs[next].prompt);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      jobs[next].got.push_back(t->token);
      if (t->finished) {
        ASSERT_TRUE((*g)->free(id).ok());
      } else {
        live[id] = next;
      }
      ++next;
    }
    if (live.empty()) continue;
    std::vector<SequenceId> ids;
    for (const auto& [id, job] : live) ids.push_back(id);
    auto out = (*g)->decode(ids);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ++steps;
    for (const StepToken& t : *out) {
      jobs[live.at(t.seq)].got.push_back(t.token);
      if (t.finished) {
        ASSERT_TRUE((*g)->free(t.seq).ok());
        live.erase(t.seq);
      }
    }
  }
  EXPECT_EQ((*g)->kv_cache_info().free_blocks, free_at_start);
  EXPECT_EQ((*g)->kv_cache_info().live_sequences, 0);
  int mismatched = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    SequenceOptions o;
    o.max_new_tokens = jobs[i].n;
    auto alone = (*g)->generate({jobs[i].prompt}, o);
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    if (alone->tokens[0] != jobs[i].got && ++mismatched <= 5)
      ADD_FAILURE() << "sequence " << i << " (prompt of " << jobs[i].prompt.size()
                    << ") differs from running alone";
  }
  EXPECT_EQ(mismatched, 0);
  std::printf("[ info     ] 1000 sequences in %lld ragged decode steps\n",
              static_cast<long long>(steps));
}

}  // namespace
}  // namespace kiln
