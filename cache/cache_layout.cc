#include "cache/cache_layout.h"

#include <algorithm>
#include <system_error>

#include "cache/manifest_io.h"

namespace kiln::cache {

namespace fs = std::filesystem;

fs::path cache_version_dir(const fs::path& root) {
  return root / ("kiln-v" + std::to_string(kFormatVersion));
}

fs::path artifact_dir(const fs::path& root, std::string_view key) {
  return cache_version_dir(root) / std::string(key);
}

bool artifact_path_safe(std::string_view rel) {
  if (rel.empty() || rel.front() == '/') return false;
  if (rel.find('\\') != std::string_view::npos) return false;
  if (rel.find('\0') != std::string_view::npos) return false;
  std::size_t start = 0;
  for (;;) {
    const std::size_t slash = rel.find('/', start);
    const std::string_view part =
        rel.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

Result<std::vector<fs::path>> cache_list(const fs::path& root) {
  std::vector<fs::path> out;
  const fs::path vdir = cache_version_dir(root);
  std::error_code ec;
  if (!fs::is_directory(vdir, ec)) return out;  // no cache here yet: nothing published
  fs::directory_iterator it(vdir, ec);
  if (ec) return io_error(vdir.string() + ": cannot list: " + ec.message());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string name = p.filename().string();
    // Lock files, staging and trash directories (possibly left by a crash) start with '.'.
    if (name.empty() || name.front() == '.') continue;
    std::error_code dir_ec;
    if (!it->is_directory(dir_ec)) continue;
    std::error_code man_ec;
    if (!fs::exists(p / kManifestFileName, man_ec)) continue;
    out.push_back(p);
  }
  if (ec) return io_error(vdir.string() + ": listing failed: " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

Result<fs::path> artifact_resolve(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / kManifestFileName, ec)) return dir;
  if (!fs::exists(dir, ec)) return not_found(dir.string() + ": no such file or directory");
  if (!fs::is_directory(dir, ec)) {
    return invalid_argument(dir.string() +
                            ": not a directory, expected a kiln artifact directory or cache root");
  }
  KILN_ASSIGN_OR_RETURN(std::vector<fs::path> found, cache_list(dir));
  if (found.size() == 1) return found.front();
  const std::string d = dir.string();
  if (found.empty()) {
    return not_found("no kiln artifact in " + d + ": expected " + d + "/" +
                     std::string(kManifestFileName) + " or " + cache_version_dir(dir).string() +
                     "/<key>/" + std::string(kManifestFileName));
  }
  std::string keys;
  for (const fs::path& p : found) {
    if (!keys.empty()) keys += ", ";
    keys += p.filename().string();
  }
  return invalid_argument(d + " holds " + std::to_string(found.size()) + " kiln artifacts (" +
                          keys + "); pass one artifact directory, e.g. " + found.front().string());
}

}  // namespace kiln::cache
