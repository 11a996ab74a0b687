// Ed25519 keys for signing artifacts (libsodium), and their text files.
//
//   PREFIX.key (mode 0600)                PREFIX.pub
//     kiln-ed25519-secret-key-v1            kiln-ed25519-public-key-v1
//     <64 hex digits: the 32-byte seed>     <64 hex digits: the 32-byte public key>
//
// One header line, one line of hex (either case), an optional final newline; nothing else. The
// secret key file holds the seed, from which the key pair is derived. Every error names the file.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "cache/status.h"

namespace kiln::cache {

inline constexpr std::size_t kPublicKeyBytes = 32;
inline constexpr std::string_view kPublicKeyHeader = "kiln-ed25519-public-key-v1";
inline constexpr std::string_view kSecretKeyHeader = "kiln-ed25519-secret-key-v1";

using PublicKey = std::array<uint8_t, kPublicKeyBytes>;

// A key pair; the secret half is wiped when it is destroyed.
struct SigningKey {
  SigningKey() = default;
  SigningKey(const SigningKey&) = default;
  SigningKey& operator=(const SigningKey&) = default;
  ~SigningKey();
  PublicKey public_key = {};
  std::array<uint8_t, 64> secret = {};  // libsodium's ed25519 secret key (seed + public key)
};

// A new random key pair.
Result<SigningKey> signing_key_generate();
// Writes PREFIX.key (0600) and PREFIX.pub; refuses to overwrite either. Returns nothing else.
Status signing_key_write(const SigningKey& key, const std::string& prefix);
Result<SigningKey> signing_key_read(const std::filesystem::path& file);

// `text` is a .pub file's contents or just its 64 hex digits; `source` names it in messages.
Result<PublicKey> public_key_parse(std::string_view text, std::string_view source);
Result<PublicKey> public_key_read(const std::filesystem::path& file);
std::string public_key_hex(const PublicKey& key);   // 64 lowercase hex digits
std::string public_key_text(const PublicKey& key);  // a .pub file's contents

}  // namespace kiln::cache
