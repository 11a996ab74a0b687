// What `kiln generate` is asked to do, parsed and checked without a GPU: the prompts (token ids
// from --prompt-ids or a --prompts file), the graph modes and the sequence options, against the
// artifact's generation section (vocabulary, max_seq_len, the largest decode batch); and, for
// --bench-decode, whether a decode step of a batch fits a generator's KV cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"
#include "kiln/generator.h"
#include "schemas/manifest.pb.h"
#include "tools/commands.h"

namespace kiln::tools {

struct GenerateRequest {
  std::vector<std::vector<int64_t>> prompts;        // generation only
  std::vector<std::optional<CudaGraphMode>> modes;  // at least one; nullopt: the artifact's
  SequenceOptions sequence;
};

// Token ids separated by commas and/or blanks (none: an empty list). `where` names the text in
// errors: "WHERE: 'x' is not a token id (an integer >= 0)".
Result<std::vector<int64_t>> token_ids_parse(std::string_view text, const std::string& where);
// One prompt per line; blank lines are skipped; errors name FILE:LINE.
Result<std::vector<std::vector<int64_t>>> prompts_read(const std::string& path);

// The arguments alone: modes known (one unless --bench-decode), a non-empty prompt, top_p in
// (0, 1], ids well formed.
Result<GenerateRequest> generate_request_parse(const GenerateArgs& a);
// The request against the artifact's generation contract (`m` has one): every id in the
// vocabulary, each prompt's tokens plus max_new_tokens within max_seq_len, the prompts within
// one decode batch.
Status generate_request_check(const GenerateRequest& r, const schema::Manifest& m);

// The most sequences one decode step takes: the sampling kernel's rows, at most max_size.
int64_t decode_rows(const schema::Manifest& m);
// Why a decode step of `batch` sequences each holding `context` tokens, timed over `iters` steps
// after a warm-up one (Generator::time_decode_step), cannot run on a generator whose cache is
// `kv` and whose decode steps take at most `rows` sequences; empty when it fits.
std::string decode_misfit(const KvCacheInfo& kv, int64_t rows, int64_t batch, int64_t context,
                          int iters);

}  // namespace kiln::tools
