// Atomic publish of an artifact: files are written into a private staging directory and
// fsynced, the manifest is written last, then the directory is renamed into place. A crash at
// any point leaves the previous state loadable; concurrent publishers of one key end with one
// complete artifact (the first to rename wins, later ones discard their stage).
//
// Publishers of one key serialise on an flock of <root>/kiln-v<format>/.lock-<key>; readers take
// no lock. A crash can leave .staging-*, .trash-* directories and .lock-* files behind: their
// names start with '.', so cache_list and artifact_resolve ignore them, and they are harmless
// (safe to delete when no compile is running).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

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

  // Writes and fsyncs one file; records its FileEntry (size, XXH3-64, role).
  Status add_file(const std::string& rel_path, std::span<const uint8_t> bytes,
                  schema::FileRole role);

  // Sets manifest.key, format_version and files, writes the manifest last, fsyncs and renames
  // the stage to <root>/kiln-v<format>/<key>. If that key already holds a verified artifact,
  // the stage is discarded and the existing path returned. Returns the artifact directory.
  Result<std::filesystem::path> publish(schema::Manifest manifest);

  const std::filesystem::path& staging_dir() const { return stage_; }

 private:
  ArtifactStage(std::filesystem::path root, std::string key, std::filesystem::path stage);
  std::filesystem::path root_;
  std::string key_;
  std::filesystem::path stage_;
  std::vector<schema::FileEntry> files_;
  bool published_ = false;
};

}  // namespace kiln::cache
