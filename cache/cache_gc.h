// Garbage collection of a cache directory (`kiln cache gc`): removes corrupt entries, leftovers
// whose compile is gone (.staging-* whose flock is free, .trash-*, index temp files) and index
// entries without a directory, and rewrites the index from what remains. Never removes an
// intact entry or the stage of a running compile; an entry being republished right now (its
// key lock is held) is skipped. Runs under the exclusive cache lock.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "cache/status.h"

namespace kiln::cache {

struct GcItem {
  std::string name;    // path relative to the cache root, or "index: <key>"
  std::string reason;  // why it goes, or why it stays
};

struct GcReport {
  std::vector<GcItem> removed;  // with dry_run: what would be removed
  std::vector<GcItem> kept;     // not intact but left alone (in use), with the reason
  int intact = 0;               // intact entries, all kept
};

// With `dry_run`, changes nothing (takes no lock either) and reports what it would do.
Result<GcReport> cache_gc(const std::filesystem::path& root, bool dry_run);

}  // namespace kiln::cache
