#include "cache/cache_scan.h"

#include <algorithm>
#include <system_error>

#include "cache/artifact_verify.h"
#include "cache/cache_layout.h"
#include "cache/manifest_io.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// A stage is live while its owner holds the flock on it.
bool stage_live(const fs::path& stage) {
  Result<UniqueFd> lock = try_lock(stage);
  return lock.ok() && !lock->valid();
}

std::vector<std::string> other_versions(const fs::path& root) {
  std::vector<std::string> out;
  std::error_code ec;
  const std::string mine = cache_version_dir(root).filename().string();
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (starts_with(name, "kiln-v") && name != mine && it->is_directory(ec)) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

fs::path cache_root_of(const fs::path& dir) {
  const fs::path d = dir.filename().empty() ? dir.parent_path() : dir;  // "cache/kiln-v2/"
  if (d.filename() == cache_version_dir("").filename()) return d.parent_path();
  return dir;
}

ScannedEntry cache_entry_check(const fs::path& artifact_dir, ScanDepth depth) {
  ScannedEntry e;
  e.key = artifact_dir.filename().string();
  e.dir = artifact_dir;
  Result<schema::Manifest> m = manifest_read(artifact_dir / kManifestFileName);
  if (!m.ok()) {
    e.status = m.status();
    return e;
  }
  e.manifest = *m;
  Result<schema::Manifest> v = artifact_verify(artifact_dir, depth == ScanDepth::kVerify);
  if (!v.ok()) e.status = v.status();
  return e;
}

Result<CacheScan> cache_scan(const fs::path& root, ScanDepth depth) {
  CacheScan scan;
  scan.root = root;
  scan.other_versions = other_versions(root);
  const fs::path vdir = cache_version_dir(root);
  std::error_code ec;
  if (!fs::is_directory(vdir, ec)) return scan;
  scan.index = cache_index_read(root);
  fs::directory_iterator it(vdir, ec);
  if (ec) return io_error(vdir.string() + ": cannot list: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    std::error_code type_ec;
    const bool is_dir = it->is_directory(type_ec) && !it->is_symlink(type_ec);
    if (starts_with(name, ".staging-") && is_dir) {
      scan.leftovers.push_back({Leftover::Kind::kStage, p, stage_live(p)});
    } else if (starts_with(name, ".trash-") && is_dir) {
      scan.leftovers.push_back({Leftover::Kind::kTrash, p, false});
    } else if (starts_with(name, ".index.json.tmp-")) {
      scan.leftovers.push_back({Leftover::Kind::kIndexTemp, p, false});
    } else if (!name.empty() && name.front() != '.' && is_dir) {
      ScannedEntry e = cache_entry_check(p, depth);
      if (e.status.ok() && e.manifest->key() != name) {
        e.status = data_loss(p.string() + ": directory name '" + name +
                             "' differs from the manifest's key '" + e.manifest->key() +
                             "' (moved by hand?)");
      }
      scan.entries.push_back(std::move(e));
    }
  }
  if (ec) return io_error(vdir.string() + ": listing failed: " + ec.message());
  std::sort(scan.entries.begin(), scan.entries.end(),
            [](const ScannedEntry& a, const ScannedEntry& b) { return a.key < b.key; });
  std::sort(scan.leftovers.begin(), scan.leftovers.end(),
            [](const Leftover& a, const Leftover& b) { return a.path < b.path; });
  return scan;
}

Result<std::vector<ScannedEntry>> cache_entries(const fs::path& dir, ScanDepth depth) {
  std::error_code ec;
  if (fs::exists(dir / kManifestFileName, ec)) return std::vector{cache_entry_check(dir, depth)};
  if (!fs::exists(dir, ec)) return not_found(dir.string() + ": no such file or directory");
  if (!fs::is_directory(dir, ec)) {
    return invalid_argument(dir.string() +
                            ": not a directory, expected a kiln artifact directory or cache root");
  }
  const fs::path root = cache_root_of(dir);
  KILN_ASSIGN_OR_RETURN(CacheScan scan, cache_scan(root, depth));
  if (!scan.entries.empty()) return std::move(scan.entries);
  std::string msg = "no kiln artifact in " + dir.string() + ": expected " +
                    (dir / kManifestFileName).string() + " or " + cache_version_dir(root).string() +
                    "/<key>/" + std::string(kManifestFileName);
  if (!scan.other_versions.empty()) {
    msg += "; found artifacts of another format (";
    for (std::size_t i = 0; i < scan.other_versions.size(); ++i)
      msg += (i ? ", " : "") + scan.other_versions[i];
    msg += "), this kiln reads format " + std::to_string(kFormatVersion);
  }
  return not_found(msg);
}

}  // namespace kiln::cache
