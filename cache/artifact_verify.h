// Verifies an artifact directory before anything trusts it: the manifest's header and
// checksum, its format version, every file path (safe, inside the artifact), and every file's
// size and XXH3-64. Each error names the file and what disagreed.
#pragma once

#include <filesystem>

#include "cache/status.h"
#include "schemas/manifest.pb.h"

namespace kiln::cache {

Result<schema::Manifest> artifact_verify(const std::filesystem::path& artifact_dir);

}  // namespace kiln::cache
