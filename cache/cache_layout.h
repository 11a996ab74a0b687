// Where artifacts live: <root>/kiln-v<format>/<key>/{manifest.kiln, weights.bin, *.cubin, ...}.
// Staging directories are <root>/kiln-v<format>/.staging-<key>-<random>; lock files are
// <root>/kiln-v<format>/.lock-<key>. Nothing in an artifact refers to an absolute path.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "cache/status.h"

namespace kiln::cache {

std::filesystem::path cache_version_dir(const std::filesystem::path& root);
std::filesystem::path artifact_dir(const std::filesystem::path& root, std::string_view key);

// True when `rel` is a safe artifact-relative path: non-empty, relative, '/'-separated,
// no "." or ".." components, no empty components, no backslashes or NUL.
bool artifact_path_safe(std::string_view rel);

// Published artifacts under a cache root (directories with a manifest), sorted by key.
Result<std::vector<std::filesystem::path>> cache_list(const std::filesystem::path& root);

// `dir` is either an artifact directory (it holds the manifest) or a cache root. For a root with
// exactly one artifact, returns it; with none or several, an error listing what was found.
Result<std::filesystem::path> artifact_resolve(const std::filesystem::path& dir);

}  // namespace kiln::cache
