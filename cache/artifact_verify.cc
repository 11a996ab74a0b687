#include "cache/artifact_verify.h"

#include <cstdio>
#include <iterator>
#include <set>
#include <string>
#include <system_error>

#include "cache/cache_layout.h"
#include "cache/file_blocks.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

std::string hex64(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof(buf), "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// Each directory between the artifact root and the file must be a real directory, not a
// symlink, so no listed path can lead outside the artifact.
Status check_parents(const fs::path& dir, const std::string& rel) {
  fs::path cur = dir;
  const fs::path relp(rel);
  for (auto it = relp.begin(); it != relp.end(); ++it) {
    if (std::next(it) == relp.end()) break;
    cur /= *it;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(cur, ec);
    if (st.type() == fs::file_type::not_found) {
      return not_found(cur.string() + ": directory missing (the manifest lists '" + rel + "')");
    }
    if (ec) return io_error(cur.string() + ": cannot stat: " + ec.message());
    if (fs::is_symlink(st)) {
      return data_loss(cur.string() + ": is a symlink, expected a directory inside the artifact");
    }
    if (!fs::is_directory(st)) return data_loss(cur.string() + ": expected a directory");
  }
  return Status::ok_status();
}

Status verify_entry(const fs::path& dir, const schema::FileEntry& e, bool hash_files) {
  KILN_RETURN_IF_ERROR(check_parents(dir, e.path()));
  const fs::path p = dir / e.path();
  const std::string name = p.string();
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(p, ec);
  if (st.type() == fs::file_type::not_found) {
    return not_found(name + ": missing, the manifest lists it (" + std::to_string(e.size()) +
                     " bytes)");
  }
  if (ec) return io_error(name + ": cannot stat: " + ec.message());
  if (fs::is_symlink(st)) {
    return data_loss(name + ": is a symlink; artifact files must be regular files");
  }
  if (!fs::is_regular_file(st)) return data_loss(name + ": not a regular file");
  // Cheap size check first, so a truncated multi-GB file fails before it is hashed.
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) return io_error(name + ": cannot read size: " + ec.message());
  if (size != e.size()) {
    return data_loss(name + ": size " + std::to_string(size) + " bytes, manifest says " +
                     std::to_string(e.size()));
  }
  if (!hash_files) return Status::ok_status();
  KILN_ASSIGN_OR_RETURN(const FileDigest d, file_digest_beneath(dir, e.path(), e.block_bytes()));
  if (d.size != e.size()) {
    return data_loss(name + ": size " + std::to_string(d.size) + " bytes, manifest says " +
                     std::to_string(e.size()));
  }
  if (d.xxh3 != e.xxh3()) {
    return data_loss(name + ": XXH3 " + hex64(d.xxh3) + " does not match the manifest's " +
                     hex64(e.xxh3()) + " (file corrupted)");
  }
  // The block digests (what the runtime checks as it uploads) must describe the same bytes.
  for (int i = 0; i < e.block_xxh3_size(); ++i)
    if (static_cast<size_t>(i) >= d.blocks.size() || d.blocks[i] != e.block_xxh3(i))
      return data_loss(name + ": block " + std::to_string(i) + " (bytes from " +
                       std::to_string(static_cast<uint64_t>(i) * e.block_bytes()) +
                       ") does not match the manifest's block_xxh3 (manifest altered?)");
  return Status::ok_status();
}

}  // namespace

Status manifest_check_files(const schema::Manifest& m, std::string_view source) {
  const std::string src(source);
  std::set<std::string> listed;
  for (const schema::FileEntry& e : m.files()) {
    if (!artifact_path_safe(e.path())) {
      return data_loss(src + ": unsafe file path '" + e.path() +
                       "': expected a relative '/'-separated path without '.', '..' or empty "
                       "components");
    }
    if (e.path() == kManifestFileName) {
      return data_loss(src + ": files lists '" + e.path() + "', the manifest's own name");
    }
    if (!listed.insert(e.path()).second) {
      return data_loss(src + ": file '" + e.path() + "' is listed more than once");
    }
    if (const std::string p = file_blocks_problem(e); !p.empty())
      return data_loss(src + ": file '" + e.path() + "': " + p);
  }
  if (!m.weights_file().empty() && !listed.contains(m.weights_file())) {
    return data_loss(src + ": weights_file '" + m.weights_file() + "' is not listed in files");
  }
  for (int i = 0; i < m.modules_size(); ++i) {
    for (const schema::Module::Cubin& c : m.modules(i).cubins()) {
      if (!listed.contains(c.path())) {
        return data_loss(src + ": module " + std::to_string(i) + " cubin '" + c.path() + "' (" +
                         c.arch() + ") is not listed in files");
      }
    }
  }
  return Status::ok_status();
}

Result<schema::Manifest> artifact_verify(const fs::path& artifact_dir, bool hash_files) {
  const fs::path mpath = artifact_dir / kManifestFileName;
  KILN_ASSIGN_OR_RETURN(schema::Manifest m, manifest_read(mpath));
  KILN_RETURN_IF_ERROR(manifest_check_files(m, mpath.string()));
  for (const schema::FileEntry& e : m.files()) {
    KILN_RETURN_IF_ERROR(verify_entry(artifact_dir, e, hash_files));
  }
  return m;
}

}  // namespace kiln::cache
