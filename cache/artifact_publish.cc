#include "cache/artifact_publish.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <system_error>
#include <utility>

#include "cache/artifact_verify.h"
#include "cache/cache_layout.h"
#include "cache/file_hash.h"
#include "cache/manifest_io.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

// Closes a file descriptor on scope exit (which also releases an flock held through it).
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Maps an errno to a Status whose message is "<what>: <strerror>".
Status errno_status(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(msg + " (disk full)");
  if (err == ENOENT) return not_found(std::move(msg));
  return io_error(std::move(msg));
}

Status errc_status(const std::error_code& ec, const std::string& what) {
  if (ec.category() == std::generic_category() || ec.category() == std::system_category())
    return errno_status(ec.value(), what);
  return io_error(what + ": " + ec.message());
}

std::string random_suffix() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) ^ rd() ^ (uint64_t{static_cast<uint32_t>(::getpid())});
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, dir.string() + ": cannot open directory to fsync");
  UniqueFd guard(fd);
  if (::fsync(fd) != 0) return errno_status(errno, dir.string() + ": fsync failed");
  return Status::ok_status();
}

// Creates `path` (which must not exist), writes all bytes, fsyncs and closes it.
Status write_file_durable(const fs::path& path, std::span<const uint8_t> bytes) {
  const std::string name = path.string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, name + ": cannot create");
  UniqueFd guard(fd);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, name + ": write failed after " + std::to_string(done) + " of " +
                                     std::to_string(bytes.size()) + " bytes");
    }
    done += static_cast<std::size_t>(n);  // a short write: loop for the rest
  }
  if (::fsync(fd) != 0) return errno_status(errno, name + ": fsync failed");
  if (::close(guard.release()) != 0) return errno_status(errno, name + ": close failed");
  return Status::ok_status();
}

// A name for the artifact directory: one safe path component, not hidden.
bool key_valid(const std::string& key) {
  return artifact_path_safe(key) && key.find('/') == std::string::npos && key.front() != '.';
}

}  // namespace

ArtifactStage::ArtifactStage(fs::path root, std::string key, fs::path stage)
    : root_(std::move(root)), key_(std::move(key)), stage_(std::move(stage)) {}

ArtifactStage::~ArtifactStage() {
  if (published_ || stage_.empty()) return;
  std::error_code ec;
  fs::remove_all(stage_, ec);  // best effort: a leftover stage is ignored by cache_list
}

Result<std::unique_ptr<ArtifactStage>> ArtifactStage::begin(const fs::path& root,
                                                            const std::string& key) {
  if (!key_valid(key)) {
    return invalid_argument("cache key '" + key +
                            "' is not a valid directory name (expected e.g. 32 hex digits)");
  }
  const fs::path vdir = cache_version_dir(root);
  std::error_code ec;
  fs::create_directories(vdir, ec);
  if (ec) return errc_status(ec, "cannot create cache directory " + vdir.string());
  if (!fs::is_directory(vdir, ec)) {
    return io_error("cannot use cache directory " + vdir.string() + ": not a directory");
  }
  for (int attempt = 0; attempt < 16; ++attempt) {
    const fs::path stage = vdir / (".staging-" + key + "-" + random_suffix());
    if (::mkdir(stage.c_str(), 0755) == 0) {
      return std::unique_ptr<ArtifactStage>(new ArtifactStage(root, key, stage));
    }
    if (errno != EEXIST)
      return errno_status(errno, "cannot create staging directory " + stage.string());
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
  if (rel_path == kManifestFileName) {
    return invalid_argument("artifact path '" + rel_path +
                            "' is reserved for the manifest, which publish() writes");
  }
  for (const schema::FileEntry& e : files_) {
    if (e.path() == rel_path) {
      return invalid_argument("artifact file '" + rel_path + "' was already added to stage " +
                              stage_.string());
    }
  }
  const fs::path target = stage_ / rel_path;
  std::error_code ec;
  if (target.parent_path() != stage_) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) return errc_status(ec, "cannot create directory " + target.parent_path().string());
  }
  Status st = write_file_durable(target, bytes);
  if (!st.ok()) {
    fs::remove(target, ec);  // no partial file left behind
    return st;
  }
  schema::FileEntry e;
  e.set_path(rel_path);
  e.set_size(bytes.size());
  e.set_xxh3(hash64(bytes.data(), bytes.size()));
  e.set_role(role);
  files_.push_back(std::move(e));
  return Status::ok_status();
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
  KILN_RETURN_IF_ERROR(write_file_durable(
      mpath, {reinterpret_cast<const uint8_t*>(encoded.data()), encoded.size()}));

  // Make every directory entry durable: subdirectories (deepest first), then the stage.
  std::set<fs::path, std::greater<>> dirs;
  for (const schema::FileEntry& e : files_) {
    for (fs::path p = fs::path(e.path()).parent_path(); !p.empty(); p = p.parent_path())
      dirs.insert(stage_ / p);
  }
  for (const fs::path& d : dirs) KILN_RETURN_IF_ERROR(fsync_dir(d));
  KILN_RETURN_IF_ERROR(fsync_dir(stage_));

  const fs::path vdir = cache_version_dir(root_);
  const fs::path lock_path = vdir / (".lock-" + key_);
  const int lfd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lfd < 0) return errno_status(errno, "cannot open lock file " + lock_path.string());
  UniqueFd lock(lfd);  // closing it releases the flock
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return errno_status(errno, "cannot lock " + lock_path.string());
  }

  const fs::path final_dir = artifact_dir(root_, key_);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(final_dir, ec))) {
    if (artifact_verify(final_dir).ok()) {
      // Someone else published this key first; theirs is complete, so ours is redundant.
      fs::remove_all(stage_, ec);
      published_ = true;
      return final_dir;
    }
    // Corrupt or incomplete: move it aside atomically, then delete it.
    const fs::path trash = vdir / (".trash-" + key_ + "-" + random_suffix());
    if (::rename(final_dir.c_str(), trash.c_str()) != 0) {
      return errno_status(errno, "cannot move the corrupt artifact " + final_dir.string() +
                                     " aside to " + trash.string());
    }
    fs::remove_all(trash, ec);  // best effort: a leftover .trash-* is ignored
  }
  if (::rename(stage_.c_str(), final_dir.c_str()) != 0) {
    return errno_status(errno, "cannot rename " + stage_.string() + " to " + final_dir.string());
  }
  published_ = true;
  KILN_RETURN_IF_ERROR(fsync_dir(vdir));
  return final_dir;
}

}  // namespace kiln::cache
