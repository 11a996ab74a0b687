// `kiln generate`'s GPU-less half (tools/generate_request.h): token ids and prompt files parsed
// with errors that name the text, the file and line; modes; and a request checked against a
// generation section made here (the vocabulary, max_seq_len, the largest batch), and whether a
// --bench-decode batch fits a KV cache.
#include "tools/generate_request.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/runtime/expect_error.h"
#include "tests/support/temp_dir.h"

namespace kiln::tools {
namespace {

using runtime::testing::is_error;

TEST(GenerateRequest, TokenIds) {
  auto ids = token_ids_parse("1,2, 3  4,\t5 ", "--prompt-ids");
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  EXPECT_EQ(*ids, (std::vector<int64_t>{1, 2, 3, 4, 5}));
  ids = token_ids_parse(" , ", "x");
  ASSERT_TRUE(ids.ok());
  EXPECT_TRUE(ids->empty());
  for (const char* bad : {"1,x", "1,-2", "1,2.5", "99999999999999999999", "+3"})
    EXPECT_TRUE(is_error(token_ids_parse(bad, "--prompt-ids").status(),
                         StatusCode::kInvalidArgument, {"--prompt-ids: '", "is not a token id"}))
        << bad;
  EXPECT_TRUE(is_error(token_ids_parse("7 abc", "f.txt:3").status(), StatusCode::kInvalidArgument,
                       {"f.txt:3: 'abc' is not a token id (an integer >= 0)"}));
}

TEST(GenerateRequest, PromptsFile) {
  kiln::testing::TempDir tmp;
  const std::string path = (tmp.path() / "prompts.txt").string();
  std::ofstream(path) << "1,2,3\n\n4 5\r\n 6 \n";
  auto prompts = prompts_read(path);
  ASSERT_TRUE(prompts.ok()) << prompts.status().to_string();
  EXPECT_EQ(*prompts, (std::vector<std::vector<int64_t>>{{1, 2, 3}, {4, 5}, {6}}));
  std::ofstream(path) << "1\n2 three\n";
  EXPECT_TRUE(
      is_error(prompts_read(path).status(), StatusCode::kInvalidArgument, {path + ":2: 'three'"}));
  std::ofstream(path) << "\n \n";
  EXPECT_TRUE(
      is_error(prompts_read(path).status(), StatusCode::kInvalidArgument, {"holds no prompt"}));
  EXPECT_TRUE(is_error(prompts_read(path + ".missing").status(), StatusCode::kNotFound,
                       {"cannot open", "prompts.txt.missing"}));
}

GenerateArgs args(std::string prompt_ids) {
  GenerateArgs a;
  a.prompt_ids = std::move(prompt_ids);
  a.prompt_ids_given = true;
  return a;
}

TEST(GenerateRequest, Arguments) {
  GenerateArgs a = args("5 6");
  a.max_new_tokens = 9;
  a.temperature = 0.5f;
  a.top_k = 4;
  a.top_p = 0.9f;
  a.seed = 11;
  a.stop_tokens = "2,3";
  auto r = generate_request_parse(a);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->prompts, (std::vector<std::vector<int64_t>>{{5, 6}}));
  ASSERT_EQ(r->modes.size(), 1u);
  EXPECT_FALSE(r->modes[0].has_value());  // the artifact's
  EXPECT_EQ(r->sequence.max_new_tokens, 9);
  EXPECT_EQ(r->sequence.sampling.temperature, 0.5f);
  EXPECT_EQ(r->sequence.sampling.top_k, 4);
  EXPECT_EQ(r->sequence.sampling.top_p, 0.9f);
  EXPECT_EQ(r->sequence.sampling.seed, 11u);
  EXPECT_EQ(r->sequence.stop_tokens, (std::vector<int64_t>{2, 3}));

  EXPECT_TRUE(is_error(generate_request_parse(args("")).status(), StatusCode::kInvalidArgument,
                       {"--prompt-ids: the prompt is empty"}));
  EXPECT_TRUE(is_error(generate_request_parse(GenerateArgs{}).status(),
                       StatusCode::kInvalidArgument, {"give a prompt"}));
  a = args("1");
  a.modes = {"FULL", "NONE"};
  EXPECT_TRUE(is_error(generate_request_parse(a).status(), StatusCode::kInvalidArgument,
                       {"--mode: generation runs in one mode"}));
  a.modes = {"FULLEST"};
  EXPECT_TRUE(is_error(generate_request_parse(a).status(), StatusCode::kInvalidArgument,
                       {"unknown cudagraph mode 'FULLEST'"}));
  a = args("1");
  a.top_p = 0.0f;
  EXPECT_TRUE(is_error(generate_request_parse(a).status(), StatusCode::kInvalidArgument,
                       {"--top-p 0 is outside (0, 1]"}));
  a = args("1");
  a.stop_tokens = "4,z";
  EXPECT_TRUE(is_error(generate_request_parse(a).status(), StatusCode::kInvalidArgument,
                       {"--stop-tokens: 'z'"}));
  // --bench-decode: no prompt, several modes.
  GenerateArgs b;
  b.bench_decode = true;
  b.modes = {"FULL", "NONE"};
  r = generate_request_parse(b);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->modes.size(), 2u);
  EXPECT_EQ(r->modes[1], CudaGraphMode::kNone);
  EXPECT_TRUE(r->prompts.empty());
}

// A generation section: vocabulary 100, 4 sequences of at most 32 tokens, 8 sampling rows,
// max_size 64.
schema::Manifest generation_manifest() {
  schema::Manifest m;
  m.set_model_name("tiny_lm");
  m.mutable_config()->set_max_size(64);
  schema::Generation* g = m.mutable_generation();
  g->set_vocab(100);
  g->set_max_sequences(4);
  g->set_max_seq_len(32);
  g->mutable_sampling()->set_grid(8);
  return m;
}

TEST(GenerateRequest, AgainstTheGenerationSection) {
  const schema::Manifest m = generation_manifest();
  EXPECT_EQ(decode_rows(m), 8);
  GenerateRequest r;
  r.prompts = {{1, 2, 3}, {99}};
  r.sequence.max_new_tokens = 30;
  EXPECT_TRUE(generate_request_check(r, m).ok());  // 3 + 30 - 1 = 32 slots
  r.sequence.max_new_tokens = 31;
  EXPECT_TRUE(is_error(
      generate_request_check(r, m), StatusCode::kInvalidArgument,
      {"prompt 0: 3 tokens + --max-new-tokens 31 need 33 cache slots; max_seq_len is 32"}));
  r.sequence.max_new_tokens = 4;
  r.prompts = {{1, 100}};
  EXPECT_TRUE(is_error(generate_request_check(r, m), StatusCode::kInvalidArgument,
                       {"prompt 0: token 1: 100 is outside the vocabulary [0, 100) of 'tiny_lm'"}));
  r.prompts = {{1}};
  r.sequence.stop_tokens = {7, 250};
  EXPECT_TRUE(is_error(generate_request_check(r, m), StatusCode::kInvalidArgument,
                       {"--stop-tokens: token 250 is outside the vocabulary"}));
  r.sequence.stop_tokens = {};
  r.prompts.assign(5, {1});
  EXPECT_TRUE(is_error(generate_request_check(r, m), StatusCode::kInvalidArgument,
                       {"5 prompts exceed the largest batch of 'tiny_lm': 4 (max_sequences 4, "
                        "sampling rows 8, max_size 64)"}));
}

TEST(GenerateRequest, DecodeMisfit) {
  KvCacheInfo kv;
  kv.num_blocks = 40;
  kv.free_blocks = 40;
  kv.block_size = 16;
  kv.max_sequences = 8;
  kv.max_seq_len = 128;
  EXPECT_EQ(decode_misfit(kv, 8, 4, 100, 10), "");  // 111 tokens: 7 blocks each, 28 in all
  EXPECT_EQ(decode_misfit(kv, 8, 4, 120, 10),
            "context 120 + 11 decode steps exceed max_seq_len 128");
  EXPECT_EQ(decode_misfit(kv, 8, 9, 10, 5), "batch 9 exceeds max_sequences 8");
  EXPECT_EQ(decode_misfit(kv, 2, 4, 10, 5),
            "batch 4 exceeds the largest decode step of 2 sequences");
  EXPECT_EQ(decode_misfit(kv, 8, 6, 100, 10), "needs 42 KV cache blocks of 16 tokens, 40 are free");
}

}  // namespace
}  // namespace kiln::tools
