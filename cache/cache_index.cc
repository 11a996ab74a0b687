#include "cache/cache_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <system_error>

#include "cache/cache_layout.h"
#include "cache/fs_ops.h"
#include "cache/manifest_io.h"
#include "cache/open_beneath.h"

namespace kiln::cache {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;  // 64 MiB: far more than any cache needs

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

json to_json(const std::vector<IndexEntry>& entries) {
  json arr = json::array();
  for (const IndexEntry& e : entries) {
    arr.push_back({{"key", e.key},
                   {"model", e.model},
                   {"targets", e.targets},
                   {"bytes", e.bytes},
                   {"created", e.created}});
  }
  return {{"format_version", kFormatVersion}, {"entries", arr}};
}

Status write_index(const fs::path& vdir, const std::vector<IndexEntry>& entries) {
  const std::string text = to_json(entries).dump(2) + "\n";
  const fs::path tmp = vdir / (".index.json.tmp-" + random_suffix());
  Status st = write_file_durable(tmp, {reinterpret_cast<const uint8_t*>(text.data()), text.size()},
                                 "index.json.tmp");
  if (st.ok()) st = rename_path(tmp, vdir / kIndexFileName, "index.json.tmp -> index.json");
  if (!st.ok()) {
    std::error_code ec;
    fs::remove(tmp, ec);
    return st.with_context("updating the cache index " + (vdir / kIndexFileName).string());
  }
  return fsync_dir(vdir, "version-dir after index.json");
}

}  // namespace

IndexEntry index_entry_for(const schema::Manifest& m, uint64_t manifest_bytes) {
  IndexEntry e;
  e.key = m.key();
  e.model = m.model_name();
  e.targets.assign(m.factors().targets().begin(), m.factors().targets().end());
  e.bytes = manifest_bytes;
  for (const schema::FileEntry& f : m.files()) e.bytes += f.size();
  e.created = utc_now();
  return e;
}

Result<std::vector<IndexEntry>> cache_index_read(const fs::path& root) {
  const fs::path p = cache_version_dir(root) / kIndexFileName;
  // Beneath the version directory, no symlink, never blocking on a FIFO, bounded in size.
  const UniqueFd fd(open_beneath(p.parent_path(), p.filename(), BeneathSymlinks::kRefuse));
  if (fd.get() == -ENOENT) return not_found(p.string() + ": no cache index");
  if (!fd.valid()) return io_error(p.string() + ": cannot open: " + std::strerror(-fd.get()));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return io_error(p.string() + ": not a readable regular file (cache index)");
  if (static_cast<uint64_t>(st.st_size) > kMaxIndexBytes)
    return data_loss(p.string() + ": " + std::to_string(st.st_size) +
                     " bytes, more than a cache index may hold (" + std::to_string(kMaxIndexBytes) +
                     ")");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(p.string() + ": read failed: " + std::strerror(errno));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return data_loss(p.string() + ": not valid JSON (corrupt cache index)");
  try {
    if (j.at("format_version").get<uint32_t>() != kFormatVersion) {
      return data_loss(p.string() + ": format_version " + j.at("format_version").dump() +
                       ", expected " + std::to_string(kFormatVersion));
    }
    std::vector<IndexEntry> out;
    for (const json& e : j.at("entries")) {
      IndexEntry x;
      x.key = e.at("key").get<std::string>();
      x.model = e.at("model").get<std::string>();
      x.targets = e.at("targets").get<std::vector<std::string>>();
      x.bytes = e.at("bytes").get<uint64_t>();
      x.created = e.at("created").get<std::string>();
      out.push_back(std::move(x));
    }
    return out;
  } catch (const json::exception& e) {
    return data_loss(p.string() + ": unexpected cache index contents: " + e.what());
  }
}

std::vector<IndexEntry> cache_index_from_scan(const fs::path& root) {
  std::vector<IndexEntry> out;
  Result<std::vector<fs::path>> dirs = cache_list(root);
  if (!dirs.ok()) return out;
  for (const fs::path& d : *dirs) {
    Result<schema::Manifest> m = manifest_read(d / kManifestFileName);
    if (!m.ok() || m->key() != d.filename().string()) continue;
    std::error_code ec;
    const uintmax_t size = fs::file_size(d / kManifestFileName, ec);
    IndexEntry e = index_entry_for(*m, ec ? 0 : size);
    e.created.clear();  // unknown
    out.push_back(std::move(e));
  }
  return out;
}

Status cache_index_write_locked(const fs::path& root, std::vector<IndexEntry> entries) {
  std::sort(entries.begin(), entries.end(),
            [](const IndexEntry& a, const IndexEntry& b) { return a.key < b.key; });
  return write_index(cache_version_dir(root), entries);
}

Status cache_index_upsert(const fs::path& root, const IndexEntry& e, bool only_if_missing) {
  KILN_ASSIGN_OR_RETURN(UniqueFd lock, cache_lock(root, LockMode::kExclusive));
  Result<std::vector<IndexEntry>> read = cache_index_read(root);
  std::vector<IndexEntry> entries =
      read.ok() ? std::move(read).value() : cache_index_from_scan(root);
  auto it = std::find_if(entries.begin(), entries.end(),
                         [&](const IndexEntry& x) { return x.key == e.key; });
  if (it == entries.end()) {
    entries.push_back(e);
  } else if (only_if_missing) {
    return Status::ok_status();
  } else {
    *it = e;
  }
  return cache_index_write_locked(root, std::move(entries));
}

Result<UniqueFd> cache_lock(const fs::path& root, LockMode mode) {
  return lock_file(cache_version_dir(root) / kCacheLockName, mode, "cache-lock");
}

}  // namespace kiln::cache
