// The cache index: <root>/kiln-v<format>/index.json, a summary of the published artifacts (model,
// targets, bytes, when published) so that several keys can sit side by side and `kiln cache ls`
// can show them. The directory scan stays the source of truth for loading and verifying; the
// index may lag it (a crash between the rename and the index update, entries deleted by hand)
// and `kiln cache gc` rewrites it from the scan. Writers rewrite it atomically (temp file, fsync,
// rename, fsync the directory) under the exclusive cache lock. It lives outside every artifact,
// so its timestamps do not make artifacts differ.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cache/fs_ops.h"
#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

inline constexpr std::string_view kIndexFileName = "index.json";
// Cache-wide lock file in the version directory: taken shared while a stage is created and
// exclusively by index writers and gc (so gc never mistakes a stage being born for a dead one).
inline constexpr std::string_view kCacheLockName = ".cache.lock";

struct IndexEntry {
  std::string key;
  std::string model;
  std::vector<std::string> targets;
  uint64_t bytes = 0;   // the manifest plus every file it lists
  std::string created;  // UTC, "2026-11-22T05:32:03Z"; informational, may be empty
};

// The entry for a published artifact; `created` is now.
IndexEntry index_entry_for(const schema::Manifest& m, uint64_t manifest_bytes);

// not_found when there is no index; data_loss naming the file when it does not parse.
Result<std::vector<IndexEntry>> cache_index_read(const std::filesystem::path& root);

// Adds `e`, or replaces the entry of its key unless `only_if_missing`, under the cache lock. An
// index that is missing or unreadable is first rebuilt from the published artifacts' manifests.
Status cache_index_upsert(const std::filesystem::path& root, const IndexEntry& e,
                          bool only_if_missing);

// Replaces the whole index, sorted by key. The caller holds the exclusive cache lock.
Status cache_index_write_locked(const std::filesystem::path& root, std::vector<IndexEntry> entries);

// Entries for every published artifact whose manifest reads (checksum checked, files not hashed).
std::vector<IndexEntry> cache_index_from_scan(const std::filesystem::path& root);

Result<UniqueFd> cache_lock(const std::filesystem::path& root, LockMode mode);

}  // namespace kiln::cache
