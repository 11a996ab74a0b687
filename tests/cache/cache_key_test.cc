#include "cache/cache_key.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kiln::cache {
namespace {

schema::BuildFactors base() {
  schema::BuildFactors f;
  f.set_compiler_version("0.1.0");
  f.set_format_version(1);
  f.set_cuda_runtime_version(12040);
  f.set_nvrtc_version("12.4");
  f.set_cublaslt_version(120402);
  f.add_targets("sm_80");
  f.add_targets("sm_90");
  f.set_model_hash("00112233445566778899aabbccddeeff");
  f.set_config_hash("ffeeddccbbaa99887766554433221100");
  return f;
}

TEST(CacheKey, FormatAndDeterminism) {
  const std::string k = cache_key(base());
  ASSERT_EQ(k.size(), 32u);
  for (char c : k) EXPECT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << k;
  EXPECT_EQ(k, cache_key(base()));
  // Copy through the wire format: the key does not depend on how the message was built.
  schema::BuildFactors copy;
  ASSERT_TRUE(copy.ParseFromString(base().SerializeAsString()));
  EXPECT_EQ(k, cache_key(copy));
}

// Pinned so that an accidental change of the encoding (which would orphan every cached
// artifact) fails here. Change it only together with the key domain string in cache_key.cc.
TEST(CacheKey, GoldenValue) { EXPECT_EQ(cache_key(base()), "267c133cfd1b55cd87d55a0fcfdecddc"); }

TEST(CacheKey, EveryFieldChangesTheKey) {
  using Mutation = std::pair<const char*, std::function<void(schema::BuildFactors&)>>;
  const std::vector<Mutation> mutations = {
      {"compiler_version", [](auto& f) { f.set_compiler_version("0.1.1"); }},
      {"format_version", [](auto& f) { f.set_format_version(2); }},
      {"cuda_runtime_version", [](auto& f) { f.set_cuda_runtime_version(12050); }},
      {"cuda_runtime_version<0", [](auto& f) { f.set_cuda_runtime_version(-1); }},
      {"nvrtc_version", [](auto& f) { f.set_nvrtc_version("12.5"); }},
      {"cublaslt_version", [](auto& f) { f.set_cublaslt_version(120403); }},
      {"targets+", [](auto& f) { f.add_targets("sm_100"); }},
      {"targets-", [](auto& f) { f.mutable_targets()->RemoveLast(); }},
      {"targets[0]", [](auto& f) { f.set_targets(0, "sm_86"); }},
      {"targets[1]", [](auto& f) { f.set_targets(1, "sm_89"); }},
      {"targets split",
       [](auto& f) {
         f.set_targets(1, "sm_");
         f.add_targets("90");
       }},
      {"targets empty", [](auto& f) { f.clear_targets(); }},
      {"model_hash", [](auto& f) { f.set_model_hash("00112233445566778899aabbccddeefe"); }},
      {"config_hash", [](auto& f) { f.set_config_hash("ffeeddccbbaa99887766554433221101"); }},
      // Moving bytes between adjacent strings must not collide (length prefixes).
      {"model/config boundary",
       [](auto& f) {
         f.set_model_hash(f.model_hash() + "f");
         f.set_config_hash(f.config_hash().substr(1));
       }},
  };
  std::set<std::string> keys = {cache_key(base())};
  for (const auto& [name, mutate] : mutations) {
    schema::BuildFactors f = base();
    mutate(f);
    const std::string k = cache_key(f);
    EXPECT_NE(k, cache_key(base())) << name;
    EXPECT_TRUE(keys.insert(k).second) << name << " collides with another mutation";
  }
}

TEST(CacheKey, EmptyFactorsHaveAKey) {
  const std::string k = cache_key(schema::BuildFactors());
  EXPECT_EQ(k.size(), 32u);
  EXPECT_NE(k, cache_key(base()));
}

}  // namespace
}  // namespace kiln::cache
