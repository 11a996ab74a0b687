// Artifact signatures: `signature.kiln` inside the artifact directory, an ed25519 signature
// (libsodium) over a message that lists every file of the artifact — `manifest.kiln` and every
// file the manifest lists, sorted by path — with its size and BLAKE2b-256 digest. The signature
// file itself is not in the message. Layout (cache/FORMAT.md, "Signature"):
//
//   bytes 0..7     magic "KILNSIG1"
//   bytes 8..11    signature format version (uint32, little endian): 1
//   bytes 12..15   message length in bytes (uint32, little endian)
//   bytes 16..47   the signer's ed25519 public key
//   bytes 48..111  the ed25519 detached signature of the message
//   bytes 112..    the message: "kiln-artifact-signature-v1" and a NUL, the file count (uint32),
//                  then per file: path length (uint32), path, size (uint64), BLAKE2b-256 (32)
//
// The signed message is stored so that a check can name the file that changed since signing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/signing_key.h"
#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

inline constexpr std::string_view kSignatureFileName = "signature.kiln";
inline constexpr std::string_view kSignatureMagic = "KILNSIG1";
inline constexpr uint32_t kSignatureVersion = 1;
inline constexpr std::size_t kSignatureHeaderBytes = 112;
inline constexpr std::string_view kSignatureDomain = "kiln-artifact-signature-v1";

// The message that `dir` (whose manifest is `m`) would be signed with now: every file hashed.
// The manifest's listed paths must already have passed manifest_check_files.
Result<std::string> artifact_signature_message(const std::filesystem::path& dir,
                                               const schema::Manifest& m);

// The bytes of `dir`'s signature.kiln, signed with `key`.
Result<std::string> artifact_signature_make(const std::filesystem::path& dir,
                                            const schema::Manifest& m, const SigningKey& key);

// Signs the published artifact `dir` in place (`kiln sign`): verifies it (artifact_verify, every
// file hashed), then writes signature.kiln through a temporary file and a rename, replacing any
// earlier signature. Do not run it while a compile publishes the same key.
Status artifact_sign_in_place(const std::filesystem::path& dir, const SigningKey& key);

// Checks `dir`'s signature.kiln: well formed, signed by one of `trusted` (which must not be
// empty), the signature valid, and every file of the artifact as it was signed. Returns the
// signer. Every refusal — unsigned, a malformed signature file, an untrusted signer, a bad
// signature, a file added, removed or changed since signing (named) — is failed_precondition
// with a message starting "artifact signature check failed"; a file that cannot be read is
// io_error.
Result<PublicKey> artifact_signature_check(const std::filesystem::path& dir,
                                           const schema::Manifest& m,
                                           std::span<const PublicKey> trusted);

}  // namespace kiln::cache
