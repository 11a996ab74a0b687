// Durable file-system steps shared by the cache's writers (publish, index, gc). Internal to
// kiln_cache. Each step first asks the fault hook (cache/publish_fault.h), naming itself with
// `label`; an injected errno fails the step exactly as the system call would have.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "cache/status.h"

namespace kiln::cache {

// Owns a file descriptor; closing it also releases an flock held through it.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset();

 private:
  int fd_ = -1;
};

// "<what>: <strerror>"; ENOSPC/EDQUOT → resource_exhausted ("disk full"), EROFS/EACCES/EPERM
// say that the cache directory is not writable, ENOENT → not_found, others io_error.
Status errno_status(int err, const std::string& what);
Status errc_status(const std::error_code& ec, const std::string& what);

std::string random_suffix();  // 16 hex digits

// mkdir(dir) (fails when it exists).
Status make_dir(const std::filesystem::path& dir, std::string_view label);
// create_directories(dir); fsyncs the parent of each directory it creates.
Status make_dirs(const std::filesystem::path& dir, std::string_view label);
Status fsync_dir(const std::filesystem::path& dir, std::string_view label);
// Creates `path` (which must not exist), writes every byte, fsyncs and closes it. On failure the
// partial file is removed.
Status write_file_durable(const std::filesystem::path& path, std::span<const uint8_t> bytes,
                          std::string_view label);
Status rename_path(const std::filesystem::path& from, const std::filesystem::path& to,
                   std::string_view label);
// remove_all; a tree that is already gone is not an error.
Status remove_tree(const std::filesystem::path& p, std::string_view label);

enum class LockMode { kShared, kExclusive };
// Opens (creating it if needed) the lock file `path` and flocks it, waiting for other holders.
Result<UniqueFd> lock_file(const std::filesystem::path& path, LockMode mode,
                           std::string_view label);
// Opens the directory `dir` and flocks it exclusively, waiting for other holders.
Result<UniqueFd> lock_dir(const std::filesystem::path& dir, std::string_view label);
// Tries to flock `path` exclusively without waiting: a valid fd when acquired, an invalid one
// when someone else holds it. `path` is a directory or a lock file (created when `create`).
Result<UniqueFd> try_lock(const std::filesystem::path& path, bool create = false);

}  // namespace kiln::cache
