// kiln cache ls | gc.
#include <fmt/format.h>

#include <map>
#include <set>

#include "cache/cache_gc.h"
#include "cache/cache_layout.h"
#include "cache/cache_scan.h"
#include "tools/commands.h"

namespace kiln::tools {
namespace {

std::string rel(const std::filesystem::path& root, const std::filesystem::path& p) {
  return p.lexically_relative(root).string();
}

void print_index_disagreements(const cache::CacheScan& scan) {
  std::vector<std::string> lines;
  std::set<std::string> dirs;
  for (const auto& e : scan.entries) dirs.insert(e.key);
  if (!scan.index.ok()) {
    if (!scan.entries.empty()) lines.push_back(scan.index.status().message());
  } else {
    std::set<std::string> indexed;
    for (const auto& x : *scan.index) {
      indexed.insert(x.key);
      if (!dirs.contains(x.key)) lines.push_back(x.key + ": in the index, but no directory");
    }
    for (const auto& k : dirs)
      if (!indexed.contains(k)) lines.push_back(k + ": a directory, but not in the index");
  }
  if (lines.empty()) return;
  fmt::print("index disagreements (`kiln cache gc` rewrites the index):\n");
  for (const auto& l : lines) fmt::print("  {}\n", l);
}

}  // namespace

int cmd_cache_ls(const std::string& dir) {
  const std::filesystem::path root = cache::cache_root_of(dir);
  auto scan = cache::cache_scan(root, cache::ScanDepth::kManifest);
  if (!scan.ok()) {
    fmt::print(stderr, "kiln cache ls: {}\n", scan.status().message());
    return kExitError;
  }
  std::map<std::string, cache::IndexEntry> index;
  if (scan->index.ok())
    for (const auto& x : *scan->index) index[x.key] = x;
  fmt::print("{}: {} entr{}\n", cache::cache_version_dir(root).string(), scan->entries.size(),
             scan->entries.size() == 1 ? "y" : "ies");
  if (!scan->entries.empty()) {
    fmt::print("{:<32}  {:<16}  {:<12}  {:>12}  {:<20}  {}\n", "KEY", "MODEL", "TARGETS", "BYTES",
               "CREATED", "STATUS");
  }
  for (const auto& e : scan->entries) {
    const std::string status = e.status.ok() ? "manifest ok" : "CORRUPT: " + e.status.message();
    const auto it = index.find(e.key);
    const std::string created =
        it == index.end() || it->second.created.empty() ? "-" : it->second.created;
    if (!e.manifest) {
      fmt::print("{:<32}  {:<16}  {:<12}  {:>12}  {:<20}  {}\n", e.key, "-", "-", "-", created,
                 status);
      continue;
    }
    uint64_t bytes = 0;
    for (const auto& f : e.manifest->files()) bytes += f.size();
    fmt::print("{:<32}  {:<16}  {:<12}  {:>12}  {:<20}  {}\n", e.key, e.manifest->model_name(),
               fmt::format("{}", fmt::join(e.manifest->factors().targets(), ",")), bytes, created,
               status);
  }
  if (!scan->entries.empty())
    fmt::print("(files checked for size only; `kiln verify` hashes every byte)\n");
  if (!scan->leftovers.empty()) fmt::print("leftovers:\n");
  for (const auto& l : scan->leftovers) {
    fmt::print(
        "  {}  {}\n", rel(root, l.path),
        l.live ? "a compile is writing it" : "left by an interrupted compile; gc removes it");
  }
  print_index_disagreements(*scan);
  for (const auto& v : scan->other_versions)
    fmt::print("note: {} holds artifacts of another format version, not read by this kiln\n", v);
  return kExitOk;
}

int cmd_cache_gc(const std::string& dir, bool dry_run) {
  auto report = cache::cache_gc(dir, dry_run);
  if (!report.ok()) {
    fmt::print(stderr, "kiln cache gc: {}\n", report.status().message());
    return kExitError;
  }
  for (const auto& r : report->removed)
    fmt::print("{} {}: {}\n", dry_run ? "would remove" : "removed", r.name, r.reason);
  for (const auto& k : report->kept) fmt::print("kept {}: {}\n", k.name, k.reason);
  fmt::print("kiln cache gc: {} intact entr{} kept, {} item{} {}\n", report->intact,
             report->intact == 1 ? "y" : "ies", report->removed.size(),
             report->removed.size() == 1 ? "" : "s", dry_run ? "would be removed" : "removed");
  return kExitOk;
}

}  // namespace kiln::tools
