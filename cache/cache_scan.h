// What a cache directory holds — published entries, leftovers of crashed or running compiles,
// the index — for `kiln verify`, `kiln inspect` and `kiln cache ls|gc`. Reads only.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cache/cache_index.h"
#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

struct ScannedEntry {
  std::string key;  // the directory name
  std::filesystem::path dir;
  Status status;                             // why the entry is not intact; OK when it is
  std::optional<schema::Manifest> manifest;  // when the manifest itself reads, even if files fail
};

struct Leftover {
  enum class Kind { kStage, kTrash, kIndexTemp };
  Kind kind;
  std::filesystem::path path;
  bool live = false;  // a stage whose compile is still running (its flock is held)
};

struct CacheScan {
  std::filesystem::path root;
  std::vector<ScannedEntry> entries;  // every non-hidden directory of kiln-v<format>/, by key
  std::vector<Leftover> leftovers;
  Result<std::vector<IndexEntry>> index = not_found("no cache index");
  std::vector<std::string> other_versions;  // e.g. "kiln-v2": other format versions present
};

enum class ScanDepth {
  kManifest,  // read and check each manifest (header, checksum, paths); files only stat-ed
  kVerify,    // artifact_verify: every file's size and XXH3 too
};

// The cache root for `dir`: `dir` itself, or its parent when `dir` is a kiln-v<format> directory.
std::filesystem::path cache_root_of(const std::filesystem::path& dir);

Result<CacheScan> cache_scan(const std::filesystem::path& root, ScanDepth depth);

// The entries that `dir` names: the artifact itself when it holds a manifest, otherwise every
// entry of the cache root (or version directory) `dir`. not_found, with what was expected and
// any other format versions present, when there is none.
Result<std::vector<ScannedEntry>> cache_entries(const std::filesystem::path& dir, ScanDepth depth);

// Checks one entry at `depth`.
ScannedEntry cache_entry_check(const std::filesystem::path& artifact_dir, ScanDepth depth);

}  // namespace kiln::cache
