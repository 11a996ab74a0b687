// The manifest file: a fixed 24-byte header, then the serialised schema::Manifest.
//   bytes 0..7   magic "KILNMAN1"
//   bytes 8..11  format version (uint32, little endian)
//   bytes 12..15 payload length (uint32, little endian)
//   bytes 16..23 XXH3-64 of the payload (uint64, little endian)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

// 2: kernel symbols carry their parameter signatures (cache/kernel_signature.h), which the
// runtime requires; bumping it keeps format-1 artifacts (kiln-v1/) out of this kiln's way.
inline constexpr uint32_t kFormatVersion = 2;
inline constexpr std::string_view kManifestFileName = "manifest.kiln";
inline constexpr std::size_t kManifestHeaderBytes = 24;

// Deterministic: equal manifests give equal bytes (map fields are written in key order).
std::string manifest_encode(const schema::Manifest& m);
// `payload` behind a header that matches it (magic, this format version, length, checksum):
// what manifest_encode writes around a serialised manifest. The fuzz target and corruption
// tests use it so that mutated payloads reach the parser and validator, not just the checksum.
std::string manifest_frame(std::string_view payload);
// Checks magic, version (too old and too new are distinct errors), length and checksum.
// `source` names the file in messages.
Result<schema::Manifest> manifest_decode(std::string_view bytes, std::string_view source);
Result<schema::Manifest> manifest_read(const std::filesystem::path& file);

}  // namespace kiln::cache
