// onnxruntime's greedy generation loops over a KV-cache export (tests/models/kv/<model>/
// greedy.json, written by tests/models/export_kv_decoders.py): per prompt, the prompt, the
// greedy tokens and the logits each token was chosen from. Header-only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace kiln::testing {

struct GreedyReference {
  std::vector<int64_t> prompt;
  std::vector<int64_t> tokens;                   // onnxruntime's greedy tokens
  std::vector<std::vector<double>> step_logits;  // the logits each token was chosen from
};

// The prompts of `file` (a greedy.json); empty when it cannot be read or parsed.
inline std::vector<GreedyReference> greedy_references(const std::filesystem::path& file) {
  std::ifstream f(file);
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  std::vector<GreedyReference> out;
  if (!j.is_object()) return out;
  for (const auto& p : j["prompts"])
    out.push_back({p["prompt"].get<std::vector<int64_t>>(), p["tokens"].get<std::vector<int64_t>>(),
                   p["step_logits"].get<std::vector<std::vector<double>>>()});
  return out;
}

}  // namespace kiln::testing
