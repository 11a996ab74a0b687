// Cache tests on real artifacts: the example model (tests/models/mlp_softmax) compiled by the
// pipeline, the CPU half of Model::load ("load plan"), and child processes in a private mount
// namespace (read-only bind mounts, small tmpfs) — all without a GPU.
#pragma once

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cache/artifact_verify.h"
#include "cache/cache_layout.h"
#include "cache/compatibility.h"
#include "compiler/config.h"
#include "compiler/pipeline.h"
#include "runtime/manifest_validate.h"
#include "tests/support/source_root.h"
#include "tests/support/temp_dir.h"

namespace kiln::testing {

inline compiler::CompileRequest example_request(const std::filesystem::path& cache_root,
                                                std::vector<std::string> targets = {"sm_90"},
                                                bool dump_sources = true) {
  Result<compiler::CompileConfig> c = compiler::config_load(example_model_dir() / "kiln.yaml");
  compiler::CompileConfig config = c.ok() ? *c : compiler::CompileConfig{};
  config.targets = std::move(targets);
  return {example_model_dir() / "model.onnx", config, cache_root, dump_sources};
}

inline const cache::DeviceFacts kH100{"sm_90", 13000};

// What Model::load does before its first CUDA call: resolve, verify every file, validate the
// manifest, check the device. `dir` is a cache root with one artifact or an artifact directory.
inline Result<schema::Manifest> load_plan(const std::filesystem::path& dir,
                                          const cache::DeviceFacts& device = kH100) {
  KILN_ASSIGN_OR_RETURN(std::filesystem::path artifact, cache::artifact_resolve(dir));
  KILN_ASSIGN_OR_RETURN(schema::Manifest m, cache::artifact_verify(artifact));
  KILN_RETURN_IF_ERROR(runtime::manifest_validate(m));
  KILN_RETURN_IF_ERROR(cache::artifact_check_compatible(m, device));
  return m;
}

// Every file under `dir` (hidden ones too), relative path → bytes.
inline std::map<std::string, std::string> tree_bytes(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out[e.path().lexically_relative(dir).string()] = read_bytes(e.path());
  }
  return out;
}

inline constexpr int kExitNoMount = 77;

// Runs `child` in a forked process with a private mount namespace, after `mounts` (which may
// call mount(2) there). Returns the child's exit code; kExitNoMount when mounting is not
// permitted here (the test should skip).
inline int run_with_mounts(const std::function<bool()>& mounts, const std::function<int()>& child) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0) ::_exit(kExitNoMount);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(kExitNoMount);
    if (!mounts()) ::_exit(kExitNoMount);
    ::_exit(child());
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Bind-mounts `dir` onto itself, read-only (in the calling process's mount namespace).
inline bool bind_read_only(const std::filesystem::path& dir) {
  return ::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
         ::mount(nullptr, dir.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) == 0;
}

}  // namespace kiln::testing
