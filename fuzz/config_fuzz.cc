// Fuzz target: the YAML compile config (kiln.yaml). Besides "no crash", it checks the property
// schemas/config.md promises: the normalised text of any config that parses is itself a valid
// config that normalises to the same text (it is the cache key, so a drift would split caches).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "compiler/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = kiln::compiler::config_parse(text, "fuzz.yaml");
  if (!config.ok()) return 0;
  (void)kiln::compiler::config_at_level(*config);
  const std::string normalised = kiln::compiler::config_normalised(*config);
  auto again = kiln::compiler::config_parse(normalised, "normalised.yaml");
  if (!again.ok()) {
    std::fprintf(stderr, "config fuzz: the normalised form does not parse: %s\n---\n%s---\n",
                 again.status().to_string().c_str(), normalised.c_str());
    std::abort();
  }
  const std::string twice = kiln::compiler::config_normalised(*again);
  if (twice != normalised) {
    std::fprintf(stderr, "config fuzz: normalising is not stable:\n---\n%s---\n%s---\n",
                 normalised.c_str(), twice.c_str());
    std::abort();
  }
  return 0;
}
