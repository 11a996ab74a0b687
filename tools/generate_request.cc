#include "tools/generate_request.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>

namespace kiln::tools {
namespace {

constexpr std::string_view kSeparators = ", \t\r";

}  // namespace

Result<std::vector<int64_t>> token_ids_parse(std::string_view text, const std::string& where) {
  std::vector<int64_t> ids;
  size_t at = text.find_first_not_of(kSeparators);
  while (at != std::string_view::npos) {
    const size_t end = std::min(text.find_first_of(kSeparators, at), text.size());
    const std::string_view word = text.substr(at, end - at);
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
    if (ec != std::errc() || ptr != word.data() + word.size() || v < 0)
      return invalid_argument(where + ": '" + std::string(word) +
                              "' is not a token id (an integer >= 0)");
    ids.push_back(v);
    at = text.find_first_not_of(kSeparators, end);
  }
  return ids;
}

Result<std::vector<std::vector<int64_t>>> prompts_read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return not_found("--prompts: cannot open '" + path + "'");
  std::vector<std::vector<int64_t>> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                          token_ids_parse(line, path + ":" + std::to_string(n)));
    if (!ids.empty()) prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) return invalid_argument("--prompts: '" + path + "' holds no prompt");
  return prompts;
}

Result<GenerateRequest> generate_request_parse(const GenerateArgs& a) {
  GenerateRequest r;
  for (const std::string& name : a.modes) {
    const auto m = cuda_graph_mode_from_name(name);
    if (!m)
      return invalid_argument("--mode: unknown cudagraph mode '" + name +
                              "' (NONE, PIECEWISE, FULL, FULL_DECODE_ONLY, FULL_AND_PIECEWISE)");
    r.modes.emplace_back(*m);
  }
  if (r.modes.empty()) r.modes.emplace_back(std::nullopt);
  if (a.bench_decode) return r;
  if (r.modes.size() > 1)
    return invalid_argument(
        "--mode: generation runs in one mode (several only with --bench-decode)");
  if (a.prompt_ids_given) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> ids, token_ids_parse(a.prompt_ids, "--prompt-ids"));
    if (ids.empty()) return invalid_argument("--prompt-ids: the prompt is empty");
    r.prompts.push_back(std::move(ids));
  } else if (!a.prompts_file.empty()) {
    KILN_ASSIGN_OR_RETURN(r.prompts, prompts_read(a.prompts_file));
  } else {
    return invalid_argument(
        "give a prompt (--prompt-ids 1,2,3 or --prompts FILE) or --bench-decode");
  }
  if (!(a.top_p > 0.0f && a.top_p <= 1.0f))
    return invalid_argument(fmt::format("--top-p {} is outside (0, 1]", a.top_p));
  r.sequence.sampling = {a.temperature, a.top_k, a.top_p, a.seed};
  r.sequence.max_new_tokens = a.max_new_tokens;
  KILN_ASSIGN_OR_RETURN(r.sequence.stop_tokens, token_ids_parse(a.stop_tokens, "--stop-tokens"));
  return r;
}

int64_t decode_rows(const schema::Manifest& m) {
  return std::min<int64_t>(m.generation().sampling().grid(), m.config().max_size());
}

Status generate_request_check(const GenerateRequest& r, const schema::Manifest& m) {
  const schema::Generation& g = m.generation();
  const auto vocab = static_cast<int64_t>(g.vocab());
  const auto outside = [&](int64_t id, const std::string& what) {
    return invalid_argument(fmt::format("{} {} is outside the vocabulary [0, {}) of '{}'", what, id,
                                        vocab, m.model_name()));
  };
  for (int64_t t : r.sequence.stop_tokens)
    if (t >= vocab) return outside(t, "--stop-tokens: token");
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    const std::vector<int64_t>& ids = r.prompts[p];
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= vocab) return outside(ids[i], fmt::format("prompt {}: token {}:", p, i));
    // The prompt, then one token per decode step after the first sampled one.
    const auto held = static_cast<int64_t>(ids.size()) + r.sequence.max_new_tokens - 1;
    if (held > g.max_seq_len())
      return invalid_argument(fmt::format(
          "prompt {}: {} tokens + --max-new-tokens {} need {} cache slots; max_seq_len is {}", p,
          ids.size(), r.sequence.max_new_tokens, held, g.max_seq_len()));
  }
  const int64_t batch = std::min<int64_t>(g.max_sequences(), decode_rows(m));
  if (static_cast<int64_t>(r.prompts.size()) > batch)
    return invalid_argument(fmt::format(
        "{} prompts exceed the largest batch of '{}': {} (max_sequences {}, sampling rows {}, "
        "max_size {})",
        r.prompts.size(), m.model_name(), batch, g.max_sequences(), g.sampling().grid(),
        m.config().max_size()));
  return Status::ok_status();
}

std::string decode_misfit(const KvCacheInfo& kv, int64_t rows, int64_t batch, int64_t context,
                          int iters) {
  const int64_t held = context + iters + 1;  // the prompt, the warm-up step and the timed steps
  if (held > kv.max_seq_len)
    return fmt::format("context {} + {} decode steps exceed max_seq_len {}", context, iters + 1,
                       kv.max_seq_len);
  if (batch > kv.max_sequences)
    return fmt::format("batch {} exceeds max_sequences {}", batch, kv.max_sequences);
  if (batch > rows)
    return fmt::format("batch {} exceeds the largest decode step of {} sequences", batch, rows);
  const int64_t blocks = batch * ((held + kv.block_size - 1) / kv.block_size);
  if (blocks > kv.free_blocks)
    return fmt::format("needs {} KV cache blocks of {} tokens, {} are free", blocks, kv.block_size,
                       kv.free_blocks);
  return "";
}

}  // namespace kiln::tools
