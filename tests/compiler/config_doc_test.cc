// schemas/config.md against compiler/config.cc: the page must not drift from the parser. Every
// ```yaml block on the page parses; its normalised example is exactly what config_normalised
// prints for the first example; every key config_normalised writes has a row in the keys table;
// and the "unknown key" error quoted on the page lists the keys the parser allows.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/config.h"
#include "tests/support/source_root.h"

namespace kiln::compiler {
namespace {

std::string read_page() {
  std::ifstream f(kiln::testing::source_root() / "schemas/config.md");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The bodies of the page's fenced blocks whose info string is exactly `lang`, in order.
std::vector<std::string> fenced_blocks(const std::string& page, const std::string& lang) {
  std::vector<std::string> blocks;
  const std::string open = "```" + lang + "\n";
  for (size_t at = page.find(open); at != std::string::npos; at = page.find(open, at)) {
    const size_t body = at + open.size();
    const size_t close = page.find("```", body);
    if (close == std::string::npos) break;
    blocks.push_back(page.substr(body, close - body));
    at = close + 3;
  }
  return blocks;
}

// "compilation.mode" style dotted keys of a config_normalised text (two levels deep).
std::vector<std::string> normalised_keys(const std::string& text) {
  std::vector<std::string> keys;
  std::string parent;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const bool nested = line.rfind("  ", 0) == 0;
    const std::string key = line.substr(nested ? 2 : 0, colon - (nested ? 2 : 0));
    if (!nested) parent = key;
    keys.push_back(nested ? parent + "." + key : key);
  }
  return keys;
}

TEST(ConfigDoc, EveryYamlExampleParses) {
  const std::string page = read_page();
  ASSERT_FALSE(page.empty()) << "schemas/config.md not found under KILN_SOURCE_ROOT";
  const std::vector<std::string> examples = fenced_blocks(page, "yaml");
  ASSERT_GE(examples.size(), 2u) << "the page should hold an example and its normalised form";
  for (size_t i = 0; i < examples.size(); ++i) {
    Result<CompileConfig> c = config_parse(examples[i], "config.md example " + std::to_string(i));
    EXPECT_TRUE(c.ok()) << c.status().to_string() << "\n" << examples[i];
  }
}

TEST(ConfigDoc, NormalisedExampleIsWhatConfigNormalisedPrints) {
  const std::vector<std::string> examples = fenced_blocks(read_page(), "yaml");
  ASSERT_GE(examples.size(), 2u);
  Result<CompileConfig> first = config_parse(examples.front(), "config.md example");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(examples.back(), config_normalised(*first));
  // The normalised text parses back to the same normalised text.
  Result<CompileConfig> again = config_parse(examples.back(), "config.md normalised example");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(config_normalised(*again), examples.back());
}

TEST(ConfigDoc, KeysTableListsEveryKey) {
  const std::string page = read_page();
  Result<CompileConfig> c = config_parse("size_dim: batch\nmax_size: 64\n", "minimal");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const std::vector<std::string> keys = normalised_keys(config_normalised(*c));
  ASSERT_GE(keys.size(), 10u);
  for (const std::string& key : keys)
    EXPECT_NE(page.find("| `" + key + "` |"), std::string::npos)
        << "key '" << key << "' has no row in the keys table of schemas/config.md";
  EXPECT_NE(page.find("| `autotune.budget_s` |"), std::string::npos);
}

// The kv_cache example (the one yaml block with a kv_cache) fills every kv_cache key, and each
// has a row in the keys table.
TEST(ConfigDoc, KvCacheExampleAndRows) {
  const std::string page = read_page();
  int found = 0;
  for (const std::string& example : fenced_blocks(page, "yaml")) {
    if (example.find("kv_cache:") == std::string::npos) continue;
    ++found;
    Result<CompileConfig> c = config_parse(example, "config.md kv_cache example");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    ASSERT_TRUE(c->kv_cache.has_value());
    size_t rows = 0;
    for (const std::string& key : normalised_keys(config_normalised(*c))) {
      if (key.rfind("kv_cache", 0) != 0) continue;
      ++rows;
      EXPECT_NE(page.find("| `" + key + "` |"), std::string::npos)
          << "key '" << key << "' has no row in the keys table of schemas/config.md";
    }
    EXPECT_EQ(rows, 7u);  // kv_cache and its six normalised keys
  }
  EXPECT_EQ(found, 1) << "schemas/config.md should have one kv_cache example";
  EXPECT_NE(page.find("| `kv_cache.max_blocks` |"), std::string::npos);
  EXPECT_NE(page.find("| `kv_cache.memory_fraction` |"), std::string::npos);
}

TEST(ConfigDoc, UnknownKeyErrorListsTheAllowedKeys) {
  Result<CompileConfig> c =
      config_parse("size_dim: batch\nmax_size: 64\nmax_batch: 3\n", "kiln.yaml");
  ASSERT_FALSE(c.ok());
  const std::string& message = c.status().message();
  const size_t allowed = message.find("(allowed: ");
  ASSERT_NE(allowed, std::string::npos) << message;
  EXPECT_NE(read_page().find("unknown key 'max_batch' " + message.substr(allowed)),
            std::string::npos)
      << "the page's unknown-key example should end with: " << message.substr(allowed);
}

}  // namespace
}  // namespace kiln::compiler
