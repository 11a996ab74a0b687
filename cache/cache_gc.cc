#include "cache/cache_gc.h"

#include <map>
#include <set>

#include "cache/cache_index.h"
#include "cache/cache_layout.h"
#include "cache/cache_scan.h"
#include "cache/fs_ops.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

std::string rel(const fs::path& root, const fs::path& p) {
  return p.lexically_relative(root).string();
}

const char* leftover_reason(Leftover::Kind k) {
  switch (k) {
    case Leftover::Kind::kStage:
      return "staging directory of a compile that is gone";
    case Leftover::Kind::kTrash:
      return "trash of a replaced artifact";
    case Leftover::Kind::kIndexTemp:
      return "temporary index file of an interrupted update";
  }
  return "leftover";
}

class Collector {
 public:
  Collector(fs::path root, bool dry_run) : root_(std::move(root)), dry_run_(dry_run) {}

  Result<GcReport> run() {
    KILN_ASSIGN_OR_RETURN(CacheScan scan, cache_scan(root_, ScanDepth::kVerify));
    std::error_code ec;
    if (!fs::is_directory(cache_version_dir(root_), ec)) return std::move(report_);
    UniqueFd lock;  // released on return
    if (!dry_run_) {
      KILN_ASSIGN_OR_RETURN(lock, cache_lock(root_, LockMode::kExclusive));
    }
    for (const Leftover& l : scan.leftovers) KILN_RETURN_IF_ERROR(collect_leftover(l));
    for (const ScannedEntry& e : scan.entries) KILN_RETURN_IF_ERROR(collect_entry(e));
    KILN_RETURN_IF_ERROR(rewrite_index(scan));
    return std::move(report_);
  }

 private:
  Status remove(const fs::path& p, const std::string& reason) {
    if (!dry_run_) KILN_RETURN_IF_ERROR(remove_tree(p, "gc " + rel(root_, p)));
    report_.removed.push_back({rel(root_, p), reason});
    return Status::ok_status();
  }

  Status collect_leftover(const Leftover& l) {
    if (l.kind == Leftover::Kind::kStage) {
      // Decide under the cache lock: a stage whose flock we can take has no owner any more.
      Result<UniqueFd> owner = try_lock(l.path);
      if (!owner.ok() && owner.status().code() == StatusCode::kNotFound) return Status::ok_status();
      if (!owner.ok()) return owner.status();
      if (!owner->valid()) {
        report_.kept.push_back({rel(root_, l.path), "a compile is writing it"});
        return Status::ok_status();
      }
    }
    return remove(l.path, leftover_reason(l.kind));
  }

  // An entry that could not be read (EACCES, EIO, EMFILE, a directory or FIFO where the
  // manifest should be, ...) may well be intact: it stays, and the report says why.
  bool keep_unreadable(const ScannedEntry& e) {
    if (!gc_cannot_read(e.status)) return false;
    report_.kept.push_back({rel(root_, e.dir), "cannot read: " + e.status.message()});
    unreadable_.insert(e.key);
    return true;
  }

  Status collect_entry(const ScannedEntry& e) {
    if (e.status.ok()) {
      ++report_.intact;
      intact_.insert(e.key);
      return Status::ok_status();
    }
    if (keep_unreadable(e)) return Status::ok_status();
    if (dry_run_) return remove(e.dir, e.status.message());
    // A publisher replacing this key holds its lock; re-check under it, so that what goes is
    // the corrupt entry and never an artifact that was published meanwhile.
    KILN_ASSIGN_OR_RETURN(UniqueFd key_lock,
                          try_lock(cache_version_dir(root_) / (".lock-" + e.key), true));
    if (!key_lock.valid()) {
      report_.kept.push_back({rel(root_, e.dir), "being republished right now"});
      return Status::ok_status();
    }
    std::error_code ec;
    if (!fs::exists(e.dir, ec)) return Status::ok_status();  // replaced meanwhile
    ScannedEntry again = cache_entry_check(e.dir, ScanDepth::kVerify);
    if (again.status.ok() && again.manifest->key() == e.key) {
      ++report_.intact;
      intact_.insert(e.key);
      return Status::ok_status();
    }
    if (keep_unreadable(again)) return Status::ok_status();
    const fs::path trash = cache_version_dir(root_) / (".trash-" + e.key + "-" + random_suffix());
    KILN_RETURN_IF_ERROR(rename_path(e.dir, trash, "gc key -> trash"));
    KILN_RETURN_IF_ERROR(remove_tree(trash, "gc trash"));
    report_.removed.push_back({rel(root_, e.dir), e.status.message()});
    return Status::ok_status();
  }

  // Index entries without an intact entry go; intact entries missing from it are added. Written
  // only when not a dry run (the caller then holds the exclusive cache lock).
  Status rewrite_index(const CacheScan& scan) {
    std::map<std::string, IndexEntry> old;
    if (scan.index.ok()) {
      for (const IndexEntry& x : *scan.index) old[x.key] = x;
    }
    std::vector<IndexEntry> fresh;
    for (IndexEntry& x : cache_index_from_scan(root_)) {
      if (!intact_.contains(x.key)) continue;
      if (auto it = old.find(x.key); it != old.end()) x.created = it->second.created;
      fresh.push_back(std::move(x));
    }
    for (const auto& [key, x] : old) {
      if (unreadable_.contains(key)) {
        fresh.push_back(x);  // its entry could not be read: its summary stays too
      } else if (!intact_.contains(key)) {
        report_.removed.push_back({"index: " + key, "no intact entry"});
      }
    }
    if (dry_run_) return Status::ok_status();
    return cache_index_write_locked(root_, std::move(fresh));
  }

  fs::path root_;
  bool dry_run_;
  GcReport report_;
  std::set<std::string> intact_;
  std::set<std::string> unreadable_;  // kept because they could not be read
};

}  // namespace

bool gc_cannot_read(const Status& s) { return s.code() == StatusCode::kIoError; }

Result<GcReport> cache_gc(const fs::path& root, bool dry_run) {
  return Collector(cache_root_of(root), dry_run).run();
}

}  // namespace kiln::cache
