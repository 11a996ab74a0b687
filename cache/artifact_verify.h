// Verifies an artifact directory before anything trusts it: the manifest's header and
// checksum, its format version, every file path (safe, inside the artifact), and every file's
// size and XXH3-64. Each error names the file and what disagreed.
#pragma once

#include <filesystem>
#include <string_view>

#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

// With `hash_files` false, files are only checked for presence, type and size (a quick look for
// listings). `kiln verify` hashes every file; Model::load checks sizes here and hashes the weights
// and the cubins it uploads as it reads them (files it never reads are left to `kiln verify`).
Result<schema::Manifest> artifact_verify(const std::filesystem::path& artifact_dir,
                                         bool hash_files = true);

// The checks on Manifest.files that need no file system: every path is artifact_path_safe, not
// the manifest's own name and listed once; weights_file (when set) and every cubin path are
// listed in files. `source` names the manifest in messages. Used by artifact_verify and, before
// anything is renamed into place, by ArtifactStage::publish.
Status manifest_check_files(const schema::Manifest& m, std::string_view source);

}  // namespace kiln::cache
