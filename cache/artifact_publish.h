// Atomic publish of an artifact: files are written into a private staging directory and
// fsynced, the manifest is written last, then the directory is renamed into place. A crash at
// any point leaves the previous state loadable; concurrent publishers of one key end with one
// complete artifact (the first to rename wins, later ones discard their stage).
//
// Publishers of one key serialise on an flock of <root>/kiln-v<format>/.lock-<key>; readers take
// no lock. Each stage holds an flock on its own directory for its lifetime, so `kiln cache gc`
// can tell a live stage from one whose process died (it takes the lock without waiting). A crash
// can leave .staging-*, .trash-* directories and .lock-* files behind: their names start with
// '.', so cache_list and artifact_resolve ignore them; gc removes the directories.
//
// After the rename the cache index (cache/cache_index.h) is updated. The index is a summary, not
// the source of truth: when that update fails the artifact stays published and
// index_warning() says why.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/fs_ops.h"
#include "cache/signing_key.h"
#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

class ArtifactStage {
 public:
  // Creates <root>/kiln-v<format>/.staging-<key>-<random>/ (and the root if needed).
  static Result<std::unique_ptr<ArtifactStage>> begin(const std::filesystem::path& root,
                                                      const std::string& key);
  ~ArtifactStage();  // removes the staging directory unless published
  ArtifactStage(const ArtifactStage&) = delete;
  ArtifactStage& operator=(const ArtifactStage&) = delete;

  // Writes and fsyncs one file; records its FileEntry (size, XXH3-64, role; for the weights,
  // also the block digests of cache/file_blocks.h).
  Status add_file(const std::string& rel_path, std::span<const uint8_t> bytes,
                  schema::FileRole role);

  // Sets manifest.key, format_version and files, writes the manifest last, fsyncs and renames
  // the stage to <root>/kiln-v<format>/<key>. If that key already holds a verified artifact
  // of this key, the stage is discarded and the existing path returned; anything else there
  // (corrupt, half-copied, another key's) is replaced. Returns the artifact directory.
  Result<std::filesystem::path> publish(schema::Manifest manifest);

  // Signs the artifact with `key` (cache/artifact_signature.h): publish() writes signature.kiln
  // after the manifest and before the rename, so a published entry is signed and complete or
  // absent. An existing artifact of this key then wins only if `key` signed it.
  void sign_with(const SigningKey& key) { signing_key_ = key; }

  const std::filesystem::path& staging_dir() const { return stage_; }
  // Empty unless publish() succeeded but could not update the cache index.
  const std::string& index_warning() const { return index_warning_; }

 private:
  ArtifactStage(std::filesystem::path root, std::string key, std::filesystem::path stage,
                UniqueFd stage_lock);
  Result<std::filesystem::path> keep_existing(const std::filesystem::path& final_dir);
  void update_index(const schema::Manifest& m, uint64_t manifest_bytes, bool only_if_missing);

  std::filesystem::path root_;
  std::string key_;
  std::filesystem::path stage_;
  UniqueFd stage_lock_;  // flock on stage_ while it lives
  std::string index_warning_;
  std::vector<schema::FileEntry> files_;
  std::optional<SigningKey> signing_key_ = std::nullopt;
  bool published_ = false;
};

}  // namespace kiln::cache
