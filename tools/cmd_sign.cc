// kiln keygen | sign, and the --trust key files of `kiln verify`.
#include <fmt/format.h>

#include "cache/artifact_signature.h"
#include "cache/cache_layout.h"
#include "cache/signing_key.h"
#include "tools/commands.h"

namespace kiln::tools {

int cmd_keygen(const std::string& prefix) {
  Result<cache::SigningKey> key = cache::signing_key_generate();
  Status st = key.ok() ? cache::signing_key_write(*key, prefix) : key.status();
  if (!st.ok()) {
    fmt::print(stderr, "kiln keygen: {}\n", st.message());
    return kExitError;
  }
  fmt::print("wrote {}.key (secret, mode 0600) and {}.pub (public key {})\n", prefix, prefix,
             cache::public_key_hex(key->public_key));
  return kExitOk;
}

int cmd_sign(const std::string& dir, const std::string& key_file) {
  Result<cache::SigningKey> key = cache::signing_key_read(key_file);
  if (!key.ok()) {
    fmt::print(stderr, "kiln sign: {}\n", key.status().message());
    return kExitError;
  }
  Result<std::filesystem::path> artifact = cache::artifact_resolve(dir);
  Status st = artifact.ok() ? cache::artifact_sign_in_place(*artifact, *key) : artifact.status();
  if (!st.ok()) {
    fmt::print(stderr, "kiln sign: FAILED: {}\n", st.message());
    return kExitError;
  }
  fmt::print("signed {} with key {}\n", artifact->string(), cache::public_key_hex(key->public_key));
  return kExitOk;
}

Result<std::vector<cache::PublicKey>> trusted_keys_read(const std::vector<std::string>& files) {
  std::vector<cache::PublicKey> keys;
  for (const std::string& f : files) {
    KILN_ASSIGN_OR_RETURN(cache::PublicKey k, cache::public_key_read(f));
    keys.push_back(k);
  }
  return keys;
}

}  // namespace kiln::tools
