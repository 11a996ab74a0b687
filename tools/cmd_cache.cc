// kiln cache ls | gc.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
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

// Where the index and the entry directories disagree, one line each.
std::vector<std::string> index_disagreements(const cache::CacheScan& scan) {
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
  return lines;
}

// One entry of `kiln cache ls`.
struct EntryRow {
  std::string key, model = "-", targets = "-", created = "-", status;
  std::vector<std::string> target_list;
  bool ok = false, has_manifest = false;
  uint64_t bytes = 0;
};

std::vector<EntryRow> entry_rows(const cache::CacheScan& scan) {
  std::map<std::string, cache::IndexEntry> index;
  if (scan.index.ok())
    for (const auto& x : *scan.index) index[x.key] = x;
  std::vector<EntryRow> rows;
  for (const auto& e : scan.entries) {
    EntryRow r;
    r.key = e.key;
    r.ok = e.status.ok();
    r.status = r.ok ? "manifest ok" : "CORRUPT: " + e.status.message();
    if (const auto it = index.find(e.key); it != index.end() && !it->second.created.empty())
      r.created = it->second.created;
    if (e.manifest) {
      r.has_manifest = true;
      r.model = e.manifest->model_name();
      r.target_list.assign(e.manifest->factors().targets().begin(),
                           e.manifest->factors().targets().end());
      r.targets = fmt::format("{}", fmt::join(r.target_list, ","));
      for (const auto& f : e.manifest->files()) r.bytes += f.size();
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace

int cmd_cache_ls(const std::string& dir, bool json) {
  const std::filesystem::path root = cache::cache_root_of(dir);
  auto scan = cache::cache_scan(root, cache::ScanDepth::kManifest);
  if (!scan.ok()) {
    fmt::print(stderr, "kiln cache ls: {}\n", scan.status().message());
    return kExitError;
  }
  const std::vector<EntryRow> rows = entry_rows(*scan);
  const std::vector<std::string> disagreements = index_disagreements(*scan);
  if (json) {
    nlohmann::json j = {{"cache", cache::cache_version_dir(root).string()},
                        {"entries", nlohmann::json::array()},
                        {"leftovers", nlohmann::json::array()},
                        {"index_disagreements", disagreements},
                        {"other_versions", nlohmann::json::array()}};
    for (const EntryRow& r : rows) {
      nlohmann::json e = {{"key", r.key}, {"ok", r.ok}, {"status", r.status}};
      if (r.has_manifest) {
        e["model"] = r.model;
        e["targets"] = r.target_list;
        e["bytes"] = r.bytes;
      }
      if (r.created != "-") e["created"] = r.created;
      j["entries"].push_back(std::move(e));
    }
    for (const auto& l : scan->leftovers)
      j["leftovers"].push_back({{"path", rel(root, l.path)}, {"live", l.live}});
    for (const auto& v : scan->other_versions) j["other_versions"].push_back(v);
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
  }
  fmt::print("{}: {} entr{}\n", cache::cache_version_dir(root).string(), rows.size(),
             rows.size() == 1 ? "y" : "ies");
  if (!rows.empty())
    fmt::print("{:<32}  {:<16}  {:<12}  {:>12}  {:<20}  {}\n", "KEY", "MODEL", "TARGETS", "BYTES",
               "CREATED", "STATUS");
  for (const EntryRow& r : rows)
    fmt::print("{:<32}  {:<16}  {:<12}  {:>12}  {:<20}  {}\n", r.key, r.model, r.targets,
               r.has_manifest ? std::to_string(r.bytes) : "-", r.created, r.status);
  if (!rows.empty()) fmt::print("(files checked for size only; `kiln verify` hashes every byte)\n");
  if (!scan->leftovers.empty()) fmt::print("leftovers:\n");
  for (const auto& l : scan->leftovers) {
    fmt::print(
        "  {}  {}\n", rel(root, l.path),
        l.live ? "a compile is writing it" : "left by an interrupted compile; gc removes it");
  }
  if (!disagreements.empty()) {
    fmt::print("index disagreements (`kiln cache gc` rewrites the index):\n");
    for (const auto& l : disagreements) fmt::print("  {}\n", l);
  }
  for (const auto& v : scan->other_versions)
    fmt::print("note: {} holds artifacts of another format version, not read by this kiln\n", v);
  return kExitOk;
}

int cmd_cache_gc(const std::string& dir, bool dry_run, bool json) {
  auto report = cache::cache_gc(dir, dry_run);
  if (!report.ok()) {
    fmt::print(stderr, "kiln cache gc: {}\n", report.status().message());
    return kExitError;
  }
  if (json) {
    nlohmann::json j = {{"dry_run", dry_run},
                        {"intact", report->intact},
                        {"removed", nlohmann::json::array()},
                        {"kept", nlohmann::json::array()}};
    for (const auto& r : report->removed)
      j["removed"].push_back({{"name", r.name}, {"reason", r.reason}});
    for (const auto& k : report->kept)
      j["kept"].push_back({{"name", k.name}, {"reason", k.reason}});
    fmt::print("{}\n", j.dump(2));
    return kExitOk;
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
