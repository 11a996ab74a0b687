// Garbage collection of a cache directory (`kiln cache gc`): removes corrupt entries (bad magic,
// checksum or size mismatch, parse failure, truncation, a missing file) and leftovers
// whose compile is gone (.staging-* whose flock is free, .trash-*, index temp files) and index
// entries without a directory, and rewrites the index from what remains. Never removes an
// intact entry or the stage of a running compile; an entry being republished right now (its
// key lock is held) is skipped, and so is one that could not be read (an open, stat or read that
// failed with EACCES, EIO, EMFILE, ..., or a manifest that is a directory or FIFO): it is reported
// in `kept` as "cannot read: <path>: <reason>" and its index line stays. Runs under the exclusive
// cache lock.
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
  std::vector<GcItem> kept;     // not intact but left alone (in use, unreadable), with the reason
  int intact = 0;               // intact entries, all kept
};

// Whether gc keeps an entry whose check failed with `s`: it could not be read (I/O errors), as
// opposed to read and found corrupt.
bool gc_cannot_read(const Status& s);

// With `dry_run`, changes nothing (takes no lock either) and reports what it would do.
Result<GcReport> cache_gc(const std::filesystem::path& root, bool dry_run);

}  // namespace kiln::cache
