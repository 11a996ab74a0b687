// The C API of generation (kiln_generator_* in kiln/runtime.h). Everywhere: the defaults, null
// arguments and bad options, each rejected with a message naming the argument. With a GPU: a
// model without a generation section is refused; GPT-2 from tests/models/kv, compiled for
// generation, generates onnxruntime's greedy tokens through the C API (prefill, batched decode,
// logits into caller buffers), and cache errors, max_seq_len and bad logits buffers fail cleanly
// and change nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "cache/manifest_io.h"
#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "kiln/model.h"
#include "kiln/runtime.h"
#include "runtime/cuda_check.h"
#include "tests/runtime/expect_error.h"
#include "tests/runtime/test_artifact.h"
#include "tests/support/greedy_reference.h"
#include "tests/support/source_root.h"
#include "tests/support/temp_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using runtime::testing::c_api_fails;

TEST(CApiGenerator, OptionDefaults) {
  kiln_generator_options g;
  g.mode = 3;
  g.return_logits = 1;
  kiln_generator_options_init(&g);
  EXPECT_EQ(g.mode, KILN_GRAPH_MODE_ARTIFACT);
  EXPECT_EQ(g.max_blocks, 0);
  EXPECT_EQ(g.memory_fraction, 0.0);
  EXPECT_EQ(g.return_logits, 0);
  kiln_sequence_options s;
  s.top_p = 0.5f;
  s.n_stop_tokens = 3;
  kiln_sequence_options_init(&s);
  EXPECT_EQ(s.temperature, 0.0f);
  EXPECT_EQ(s.top_k, 0);
  EXPECT_EQ(s.top_p, 1.0f);
  EXPECT_EQ(s.seed, 0u);
  EXPECT_EQ(s.max_new_tokens, 16);
  EXPECT_EQ(s.stop_tokens, nullptr);
  EXPECT_EQ(s.n_stop_tokens, 0u);
  kiln_generator_options_init(nullptr);  // ignored
  kiln_sequence_options_init(nullptr);
}

TEST(CApiGenerator, NullArguments) {
  kiln_generator* g = reinterpret_cast<kiln_generator*>(0x1);
  EXPECT_TRUE(c_api_fails(kiln_generator_create(nullptr, nullptr, &g), KILN_INVALID_ARGUMENT,
                          "kiln_generator_create: model is NULL"));
  EXPECT_EQ(g, nullptr);  // out is cleared on failure
  EXPECT_TRUE(c_api_fails(kiln_generator_create(nullptr, nullptr, nullptr), KILN_INVALID_ARGUMENT,
                          "kiln_generator_create: out is NULL"));
  EXPECT_TRUE(c_api_fails(kiln_generator_add(nullptr, 0, nullptr), KILN_INVALID_ARGUMENT,
                          "kiln_generator_add: generator is NULL"));
  const int64_t prompt[] = {1, 2};
  kiln_step_token out[2] = {};
  EXPECT_TRUE(c_api_fails(kiln_generator_prefill(nullptr, 0, prompt, 2, out), KILN_INVALID_ARGUMENT,
                          "kiln_generator_prefill: generator is NULL"));
  EXPECT_TRUE(c_api_fails(kiln_generator_decode(nullptr, prompt, 2, out), KILN_INVALID_ARGUMENT,
                          "kiln_generator_decode: generator is NULL"));
  EXPECT_TRUE(c_api_fails(kiln_generator_free_sequence(nullptr, 0), KILN_INVALID_ARGUMENT,
                          "kiln_generator_free_sequence: generator is NULL"));
  kiln_kv_cache_info info{};
  EXPECT_TRUE(c_api_fails(kiln_generator_kv_cache_info(nullptr, &info), KILN_INVALID_ARGUMENT,
                          "kiln_generator_kv_cache_info: generator is NULL"));
  int64_t vocab = 0;
  EXPECT_TRUE(c_api_fails(kiln_generator_vocab_size(nullptr, &vocab), KILN_INVALID_ARGUMENT,
                          "kiln_generator_vocab_size: generator is NULL"));
  int32_t mode = 0;
  EXPECT_TRUE(c_api_fails(kiln_generator_mode(nullptr, &mode), KILN_INVALID_ARGUMENT,
                          "kiln_generator_mode: generator is NULL"));
  const char* reason = nullptr;
  EXPECT_TRUE(c_api_fails(kiln_generator_downgrade_reason(nullptr, &reason), KILN_INVALID_ARGUMENT,
                          "kiln_generator_downgrade_reason: generator"));
  kiln_generator_free(nullptr);  // accepted
}

TEST(CApiGenerator, BadOptionsAreRejectedBeforeTheModel) {
  kiln_generator_options o;
  kiln_generator_options_init(&o);
  o.mode = 7;
  kiln_generator* g = nullptr;
  EXPECT_TRUE(c_api_fails(kiln_generator_create(nullptr, &o, &g), KILN_INVALID_ARGUMENT,
                          "kiln_generator_create: mode 7 is not a kiln_graph_mode (-1 to 4)"));
  o.mode = KILN_GRAPH_MODE_FULL;
  o.return_logits = 2;
  EXPECT_TRUE(c_api_fails(kiln_generator_create(nullptr, &o, &g), KILN_INVALID_ARGUMENT,
                          "return_logits is 2, expected 0 or 1"));
  EXPECT_EQ(g, nullptr);
}

// ---- With a GPU ----

#define REQUIRE_GPU()                                                            \
  do {                                                                           \
    std::string why;                                                             \
    if (!cuda_device_available(&why)) GTEST_SKIP() << "no CUDA device: " << why; \
  } while (0)

// Owns what a test loads through the C API.
struct Handles {
  kiln_model* model = nullptr;
  kiln_generator* gen = nullptr;
  ~Handles() {
    kiln_generator_free(gen);
    kiln_model_free(model);
  }
};

TEST(CApiGenerator, NeedsAModelCompiledForGeneration) {
  REQUIRE_GPU();
  kiln::testing::TempDir tmp;
  runtime::testing::TestModelSpec spec;  // the runtime tests' model: no generation section
  auto arch = runtime::device_arch(0);
  ASSERT_TRUE(arch.ok()) << arch.status().to_string();
  spec.arch = *arch;
  auto art = runtime::testing::test_artifact_build(tmp.path(), spec);
  ASSERT_TRUE(art.ok()) << art.status().to_string();
  Handles h;
  ASSERT_EQ(kiln_model_load(art->dir.c_str(), &h.model), KILN_OK) << kiln_last_error();
  h.gen = reinterpret_cast<kiln_generator*>(0x1);
  EXPECT_TRUE(c_api_fails(kiln_generator_create(h.model, nullptr, &h.gen), KILN_INVALID_ARGUMENT,
                          "was not compiled for generation"));
  EXPECT_EQ(h.gen, nullptr);
}

const fs::path& kv_model_dir() {
  static const fs::path dir = kiln::testing::source_root() / "tests/models/kv/gpt2_ts17_kv";
  return dir;
}

// GPT-2 (TorchScript export) compiled for generation in fp32 once per test binary: 1,024 blocks
// of 16 tokens, 8 sequences of at most 256 tokens.
struct KvArtifact {
  std::string dir;  // empty on a compile error (the test fails)
};

const KvArtifact& kv_artifact() {
  static kiln::testing::TempDir cache;
  static const KvArtifact art = [] {
    KvArtifact a;
    const std::string yaml =
        "size_dim: seq\ndims: {batch: 1}\nmax_size: 64\nprecision: fp32\n"
        "compilation:\n  mode: FULL_AND_PIECEWISE\n  cudagraph_capture_sizes: [1, 2, 4, 8, 64]\n"
        "autotune: {enabled: off}\n"
        "kv_cache:\n  block_size: 16\n  max_blocks: 1024\n  max_sequences: 8\n"
        "  max_seq_len: 256\n";
    auto config = compiler::config_parse(yaml, "c_api_generator_test.yaml");
    EXPECT_TRUE(config.ok()) << config.status().to_string();
    if (!config.ok()) return a;
    auto out = compiler::compile_model({kv_model_dir() / "model.onnx", *config, cache.path()});
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) return a;
    a.dir = out->artifact_dir.string();
    auto m = cache::manifest_read(out->artifact_dir / std::string(cache::kManifestFileName));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_TRUE(m.ok() && m->has_generation()) << "no generation section";
    if (!m.ok() || !m->has_generation()) a.dir.clear();
    return a;
  }();
  return art;
}

class CApiGeneration : public ::testing::Test {
 protected:
  void SetUp() override {
    REQUIRE_GPU();
    const KvArtifact& art = kv_artifact();
    ASSERT_FALSE(art.dir.empty());
    ASSERT_EQ(kiln_model_load(art.dir.c_str(), &h_.model), KILN_OK) << kiln_last_error();
  }
  // A new generator over the model; false (the test failed) on an error.
  bool create(int32_t return_logits, int64_t max_blocks = 0) {
    kiln_generator_options o;
    kiln_generator_options_init(&o);
    o.return_logits = return_logits;
    o.max_blocks = max_blocks;
    kiln_generator_free(h_.gen);
    h_.gen = nullptr;
    const kiln_status st = kiln_generator_create(h_.model, &o, &h_.gen);
    EXPECT_EQ(st, KILN_OK) << kiln_last_error();
    return st == KILN_OK;
  }
  kiln_kv_cache_info kv() const {
    kiln_kv_cache_info i{};
    EXPECT_EQ(kiln_generator_kv_cache_info(h_.gen, &i), KILN_OK) << kiln_last_error();
    return i;
  }
  kiln_status add(int64_t seq, int64_t max_new_tokens) {
    kiln_sequence_options s;
    kiln_sequence_options_init(&s);
    s.max_new_tokens = max_new_tokens;
    return kiln_generator_add(h_.gen, seq, &s);
  }
  kiln_status prefill(int64_t seq, const std::vector<int64_t>& prompt, kiln_step_token* out) {
    return kiln_generator_prefill(h_.gen, seq, prompt.data(), prompt.size(), out);
  }
  // One sequence from add to free: its tokens for a fixed prompt (those before a failure).
  std::vector<int64_t> generate(int64_t seq, const kiln_sequence_options& s) {
    std::vector<int64_t> out;
    EXPECT_EQ(kiln_generator_add(h_.gen, seq, &s), KILN_OK) << kiln_last_error();
    kiln_step_token t{};
    kiln_status st = prefill(seq, {5, 17, 99, 3}, &t);
    for (; st == KILN_OK; st = kiln_generator_decode(h_.gen, &seq, 1, &t)) {
      out.push_back(t.token);
      if (t.finished) break;
    }
    EXPECT_EQ(st, KILN_OK) << kiln_last_error();
    EXPECT_EQ(kiln_generator_free_sequence(h_.gen, seq), KILN_OK) << kiln_last_error();
    return out;
  }
  Handles h_;
};

int64_t argmax(const std::vector<float>& v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

// Both reference prompts as one batch: tokens exactly onnxruntime's, each step's logits in the
// caller's buffers (their argmax is the token, and they are onnxruntime's within 1e-3).
TEST_F(CApiGeneration, GreedyTokensAndLogitsMatchOnnxruntime) {
  ASSERT_TRUE(create(1));
  const std::vector<kiln::testing::GreedyReference> refs =
      kiln::testing::greedy_references(kv_model_dir() / "greedy.json");
  ASSERT_EQ(refs.size(), 2u);
  int64_t vocab = 0;
  ASSERT_EQ(kiln_generator_vocab_size(h_.gen, &vocab), KILN_OK);
  ASSERT_EQ(vocab, static_cast<int64_t>(refs[0].step_logits[0].size()));
  int32_t mode = -1;
  ASSERT_EQ(kiln_generator_mode(h_.gen, &mode), KILN_OK);
  EXPECT_EQ(mode, KILN_GRAPH_MODE_FULL_AND_PIECEWISE);
  const char* reason = nullptr;
  ASSERT_EQ(kiln_generator_downgrade_reason(h_.gen, &reason), KILN_OK);
  EXPECT_STREQ(reason, "");
  const auto n = static_cast<int64_t>(refs[0].tokens.size());
  std::vector<std::vector<float>> logits(2, std::vector<float>(static_cast<size_t>(vocab)));
  std::vector<std::vector<int64_t>> got(2);
  const auto check_logits = [&](size_t r, const kiln_step_token& t) {
    const size_t step = got[r].size() - 1;
    EXPECT_EQ(argmax(logits[r]), t.token) << "prompt " << r << " step " << step;
    const std::vector<double>& want = refs[r].step_logits[step];
    for (size_t v = 0; v < want.size(); ++v)
      ASSERT_NEAR(logits[r][v], want[v], 1e-3 + 1e-3 * std::abs(want[v]))
          << "prompt " << r << " step " << step << " logit " << v;
  };
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(add(static_cast<int64_t>(10 + r), n), KILN_OK) << kiln_last_error();
    kiln_step_token t{};
    t.logits = logits[r].data();
    t.logits_capacity = logits[r].size();
    ASSERT_EQ(prefill(static_cast<int64_t>(10 + r), refs[r].prompt, &t), KILN_OK)
        << kiln_last_error();
    EXPECT_EQ(t.seq, static_cast<int64_t>(10 + r));
    EXPECT_EQ(t.finished, 0);
    got[r].push_back(t.token);
    check_logits(r, t);
  }
  EXPECT_EQ(kv().live_sequences, 2);
  const int64_t seqs[2] = {10, 11};
  for (int64_t step = 1; step < n; ++step) {
    kiln_step_token out[2] = {};
    for (size_t r = 0; r < 2; ++r) {
      out[r].logits = logits[r].data();
      out[r].logits_capacity = logits[r].size();
    }
    ASSERT_EQ(kiln_generator_decode(h_.gen, seqs, 2, out), KILN_OK) << kiln_last_error();
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(out[r].seq, seqs[r]);
      EXPECT_EQ(out[r].finished, step == n - 1 ? 1 : 0);
      got[r].push_back(out[r].token);
      check_logits(r, out[r]);
    }
  }
  EXPECT_EQ(got[0], refs[0].tokens);
  EXPECT_EQ(got[1], refs[1].tokens);
  kiln_step_token done[2] = {};
  EXPECT_TRUE(c_api_fails(kiln_generator_decode(h_.gen, seqs, 2, done), KILN_INVALID_ARGUMENT,
                          "sequence 10 has finished"));
  EXPECT_EQ(kiln_generator_decode(h_.gen, nullptr, 0, nullptr), KILN_OK) << kiln_last_error();
  for (int64_t s : seqs) EXPECT_EQ(kiln_generator_free_sequence(h_.gen, s), KILN_OK);
  const kiln_kv_cache_info i = kv();
  EXPECT_EQ(i.live_sequences, 0);
  EXPECT_EQ(i.free_blocks, i.num_blocks);
  EXPECT_EQ(i.num_blocks, 1024);
  EXPECT_EQ(i.block_size, 16);
  EXPECT_EQ(i.max_sequences, 8);
  EXPECT_EQ(i.max_seq_len, 256);
  EXPECT_GT(i.bytes, 0);
  EXPECT_TRUE(c_api_fails(kiln_generator_free_sequence(h_.gen, 10), KILN_NOT_FOUND, "10"));
}

// Sampling through the C options: one seed gives one token sequence; a stop token ends it.
TEST_F(CApiGeneration, SamplingOptionsAndStopTokens) {
  ASSERT_TRUE(create(0));
  kiln_sequence_options s;
  kiln_sequence_options_init(&s);
  s.temperature = 0.9f;
  s.top_k = 20;
  s.top_p = 0.95f;
  s.seed = 1234;
  s.max_new_tokens = 12;
  const std::vector<int64_t> first = generate(1, s);
  EXPECT_EQ(first.size(), 12u);
  EXPECT_EQ(generate(2, s), first);
  const int64_t stop = first[2];  // the sequence finishes with its first such token
  s.stop_tokens = &stop;
  s.n_stop_tokens = 1;
  const auto at = std::find(first.begin(), first.end(), stop) - first.begin();
  EXPECT_EQ(generate(3, s), std::vector<int64_t>(first.begin(), first.begin() + at + 1));
  s.stop_tokens = nullptr;
  EXPECT_TRUE(c_api_fails(kiln_generator_add(h_.gen, 4, &s), KILN_INVALID_ARGUMENT,
                          "options->stop_tokens is NULL"));
}

// Rejected calls change nothing: bad logits buffers, max_seq_len, a full cache, a live id.
TEST_F(CApiGeneration, ErrorsChangeNothing) {
  ASSERT_TRUE(create(0, /*max_blocks=*/16));  // exactly one sequence of max_seq_len 256
  ASSERT_EQ(add(1, 4), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(c_api_fails(add(1, 4), KILN_INVALID_ARGUMENT, "1"));
  std::vector<float> buf(256);
  kiln_step_token t{};
  t.logits = buf.data();
  t.logits_capacity = buf.size();
  const std::vector<int64_t> prompt(200, 7);
  EXPECT_TRUE(c_api_fails(prefill(1, prompt, &t), KILN_INVALID_ARGUMENT,
                          "kiln_generator_prefill: out[0].logits is set but the generator was "
                          "created without return_logits"));
  EXPECT_EQ(kv().free_blocks, 16);
  t = kiln_step_token{};
  EXPECT_TRUE(c_api_fails(prefill(1, std::vector<int64_t>(257, 7), &t), KILN_INVALID_ARGUMENT,
                          "max_seq_len 256"));
  EXPECT_TRUE(c_api_fails(prefill(1, {}, &t), KILN_INVALID_ARGUMENT, "the prompt is empty"));
  EXPECT_TRUE(c_api_fails(kiln_generator_prefill(h_.gen, 1, nullptr, 3, &t), KILN_INVALID_ARGUMENT,
                          "prompt is NULL"));
  EXPECT_TRUE(c_api_fails(prefill(9, prompt, &t), KILN_NOT_FOUND, "sequence 9"));
  EXPECT_EQ(kv().free_blocks, 16);
  ASSERT_EQ(prefill(1, prompt, &t), KILN_OK) << kiln_last_error();  // 13 blocks
  ASSERT_EQ(add(2, 4), KILN_OK) << kiln_last_error();
  EXPECT_TRUE(c_api_fails(prefill(2, std::vector<int64_t>(100, 7), &t), KILN_RESOURCE_EXHAUSTED,
                          "KV cache is full"));
  kiln_kv_cache_info i = kv();
  EXPECT_EQ(i.free_blocks, 3);
  EXPECT_EQ(i.live_sequences, 2);
  ASSERT_EQ(kiln_generator_free_sequence(h_.gen, 1), KILN_OK);
  ASSERT_EQ(prefill(2, std::vector<int64_t>(100, 7), &t), KILN_OK) << kiln_last_error();
  EXPECT_EQ(kv().free_blocks, 16 - 7);
  // return_logits with too small a buffer: refused before the step.
  ASSERT_TRUE(create(1));
  ASSERT_EQ(add(5, 4), KILN_OK);
  t = kiln_step_token{};
  t.logits = buf.data();
  t.logits_capacity = 10;
  EXPECT_TRUE(c_api_fails(prefill(5, prompt, &t), KILN_INVALID_ARGUMENT,
                          "out[0].logits_capacity is 10 floats; the vocabulary has 128"));
  EXPECT_EQ(kv().free_blocks, kv().num_blocks);
}

}  // namespace
}  // namespace kiln
