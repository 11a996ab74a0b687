#include "cache/artifact_publish.h"

#include <cerrno>
#include <functional>
#include <set>
#include <system_error>
#include <utility>

#include "cache/artifact_signature.h"
#include "cache/artifact_verify.h"
#include "cache/cache_index.h"
#include "cache/cache_layout.h"
#include "cache/file_blocks.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

// A name for the artifact directory: one safe path component, not hidden.
bool key_valid(const std::string& key) {
  return artifact_path_safe(key) && key.find('/') == std::string::npos && key.front() != '.';
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

ArtifactStage::ArtifactStage(fs::path root, std::string key, fs::path stage, UniqueFd stage_lock)
    : root_(std::move(root)),
      key_(std::move(key)),
      stage_(std::move(stage)),
      stage_lock_(std::move(stage_lock)) {}

ArtifactStage::~ArtifactStage() {
  if (published_ || stage_.empty()) return;
  std::error_code ec;
  fs::remove_all(stage_, ec);  // best effort: a leftover stage is ignored, and gc removes it
}

Result<std::unique_ptr<ArtifactStage>> ArtifactStage::begin(const fs::path& root,
                                                            const std::string& key) {
  if (!key_valid(key)) {
    return invalid_argument("cache key '" + key +
                            "' is not a valid directory name (expected e.g. 32 hex digits)");
  }
  const fs::path vdir = cache_version_dir(root);
  KILN_RETURN_IF_ERROR(make_dirs(vdir, "version-dir"));
  // Shared: gc (exclusive) never sees this stage between its mkdir and its flock.
  KILN_ASSIGN_OR_RETURN(UniqueFd cache_guard, cache_lock(root, LockMode::kShared));
  for (int attempt = 0; attempt < 16; ++attempt) {
    const fs::path stage = vdir / (".staging-" + key + "-" + random_suffix());
    Status made = make_dir(stage, "stage");
    std::error_code ec;
    if (!made.ok()) {
      if (fs::exists(stage, ec)) continue;  // name taken: try another
      return made;
    }
    Result<UniqueFd> lock = lock_dir(stage, "stage");
    if (!lock.ok()) {
      fs::remove_all(stage, ec);
      return lock.status();
    }
    return std::unique_ptr<ArtifactStage>(
        new ArtifactStage(root, key, stage, std::move(lock).value()));
  }
  return internal_error("cannot find a free staging directory name under " + vdir.string());
}

Status ArtifactStage::add_file(const std::string& rel_path, std::span<const uint8_t> bytes,
                               schema::FileRole role) {
  if (published_) {
    return failed_precondition("add_file('" + rel_path + "') after the artifact " + key_ +
                               " was published");
  }
  if (!artifact_path_safe(rel_path)) {
    return invalid_argument("unsafe artifact path '" + rel_path +
                            "': expected a relative '/'-separated path without '.', '..' or "
                            "empty components");
  }
  if (rel_path == kManifestFileName || rel_path == kSignatureFileName) {
    return invalid_argument("artifact path '" + rel_path +
                            "' is reserved for the manifest or signature, which publish() writes");
  }
  for (const schema::FileEntry& e : files_) {
    if (e.path() == rel_path) {
      return invalid_argument("artifact file '" + rel_path + "' was already added to stage " +
                              stage_.string());
    }
  }
  // Parent directories inside the stage, outermost first.
  fs::path rel_dir;
  for (const fs::path& part : fs::path(rel_path).parent_path()) {
    rel_dir /= part;
    std::error_code ec;
    if (fs::is_directory(stage_ / rel_dir, ec)) continue;
    KILN_RETURN_IF_ERROR(make_dir(stage_ / rel_dir, "stage/" + rel_dir.string()));
  }
  KILN_RETURN_IF_ERROR(write_file_durable(stage_ / rel_path, bytes, "stage/" + rel_path));
  schema::FileEntry e;
  e.set_path(rel_path);
  e.set_size(bytes.size());
  e.set_xxh3(hash64(bytes.data(), bytes.size()));
  e.set_role(role);
  if (role == schema::FILE_ROLE_WEIGHTS) {
    e.set_block_bytes(kWeightsBlockBytes);
    for (uint64_t h : block_hashes(bytes.data(), bytes.size(), kWeightsBlockBytes))
      e.add_block_xxh3(h);
  }
  files_.push_back(std::move(e));
  return Status::ok_status();
}

void ArtifactStage::update_index(const schema::Manifest& m, uint64_t manifest_bytes,
                                 bool only_if_missing) {
  Status st = cache_index_upsert(root_, index_entry_for(m, manifest_bytes), only_if_missing);
  if (!st.ok()) {
    index_warning_ = "artifact " + key_ + " is published, but the cache index was not updated (" +
                     st.message() + "); `kiln cache gc` rebuilds it";
  }
}

Result<fs::path> ArtifactStage::keep_existing(const fs::path& final_dir) {
  // Someone else published this key first; theirs is complete, so ours is redundant.
  std::error_code ec;
  fs::remove_all(stage_, ec);  // best effort: gc removes a leftover once our lock is gone
  published_ = true;
  stage_lock_.reset();
  return final_dir;
}

Result<fs::path> ArtifactStage::publish(schema::Manifest manifest) {
  if (published_) return failed_precondition("artifact " + key_ + " was already published");
  manifest.set_key(key_);
  manifest.set_format_version(kFormatVersion);
  manifest.clear_files();
  for (const schema::FileEntry& e : files_) *manifest.add_files() = e;

  const fs::path mpath = stage_ / kManifestFileName;
  KILN_RETURN_IF_ERROR(manifest_check_files(manifest, mpath.string()));

  // The manifest last: a stage without one is never mistaken for an artifact.
  const std::string encoded = manifest_encode(manifest);
  KILN_RETURN_IF_ERROR(
      write_file_durable(mpath, bytes_of(encoded), "stage/" + std::string(kManifestFileName)));
  if (signing_key_) {
    KILN_ASSIGN_OR_RETURN(const std::string sig,
                          artifact_signature_make(stage_, manifest, *signing_key_));
    KILN_RETURN_IF_ERROR(write_file_durable(stage_ / kSignatureFileName, bytes_of(sig),
                                            "stage/" + std::string(kSignatureFileName)));
  }

  // Make every directory entry durable: subdirectories (deepest first), then the stage.
  std::set<fs::path, std::greater<>> dirs;
  for (const schema::FileEntry& e : files_) {
    for (fs::path p = fs::path(e.path()).parent_path(); !p.empty(); p = p.parent_path())
      dirs.insert(p);
  }
  for (const fs::path& d : dirs) KILN_RETURN_IF_ERROR(fsync_dir(stage_ / d, "stage/" + d.string()));
  KILN_RETURN_IF_ERROR(fsync_dir(stage_, "stage"));

  const fs::path vdir = cache_version_dir(root_);
  KILN_ASSIGN_OR_RETURN(UniqueFd key_lock,
                        lock_file(vdir / (".lock-" + key_), LockMode::kExclusive, "key-lock"));

  const fs::path final_dir = artifact_dir(root_, key_);
  std::error_code ec;
  const fs::file_status existing_type = fs::symlink_status(final_dir, ec);
  if (fs::exists(existing_type)) {
    // A real directory (not a symlink) holding a verified artifact of this very key.
    Result<schema::Manifest> existing =
        fs::is_directory(existing_type) ? artifact_verify(final_dir)
                                        : Result<schema::Manifest>(data_loss("not a directory"));
    if (existing.ok() && existing->key() == key_ && signing_key_) {
      // Signing: an existing artifact counts only when this key signed it.
      const PublicKey mine[] = {signing_key_->public_key};
      if (!artifact_signature_check(final_dir, *existing, mine).ok())
        existing = data_loss("unsigned");
    }
    if (existing.ok() && existing->key() == key_) {
      const uintmax_t size = fs::file_size(final_dir / kManifestFileName, ec);
      Result<fs::path> kept = keep_existing(final_dir);
      update_index(*existing, ec ? 0 : size, /*only_if_missing=*/true);
      return kept;
    }
    // Corrupt, incomplete or another key's artifact: move it aside atomically, then delete it.
    const fs::path trash = vdir / (".trash-" + key_ + "-" + random_suffix());
    Status moved = rename_path(final_dir, trash, "key -> trash");
    if (!moved.ok()) return moved.with_context("cannot move the corrupt artifact aside");
    (void)remove_tree(trash, "trash");  // best effort: gc removes a leftover .trash-*
  }
  KILN_RETURN_IF_ERROR(rename_path(stage_, final_dir, "stage -> key"));
  published_ = true;
  stage_lock_.reset();
  KILN_RETURN_IF_ERROR(fsync_dir(vdir, "version-dir"));
  update_index(manifest, encoded.size(), /*only_if_missing=*/false);
  return final_dir;
}

}  // namespace kiln::cache
