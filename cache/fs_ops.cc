#include "cache/fs_ops.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "cache/publish_fault.h"

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

PublishFaultHook& fault_hook() {
  static PublishFaultHook hook;
  return hook;
}

std::string step_name(std::string_view verb, std::string_view label) {
  std::string s(verb);
  s += ' ';
  s += label;
  return s;
}

// Writes are split so that a crash (or an injected fault) can land between two of them.
constexpr std::size_t kWriteChunk = std::size_t{64} << 20;

}  // namespace

void set_publish_fault_hook(PublishFaultHook hook) { fault_hook() = std::move(hook); }

int publish_fault_point(std::string_view step) {
  const PublishFaultHook& hook = fault_hook();
  return hook ? hook(step) : 0;
}

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Status errno_status(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(msg + " (disk full)");
  if (err == EROFS || err == EACCES || err == EPERM) {
    return io_error(msg + " (the cache directory is not writable)");
  }
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

Status make_dir(const fs::path& dir, std::string_view label) {
  int err = publish_fault_point(step_name("mkdir", label));
  if (err == 0 && ::mkdir(dir.c_str(), 0755) != 0) err = errno;
  if (err != 0) return errno_status(err, "cannot create directory " + dir.string());
  return Status::ok_status();
}

Status make_dirs(const fs::path& dir, std::string_view label) {
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = dir; !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec)) break;
    missing.push_back(p);
    if (p == p.parent_path()) break;
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    Status st = make_dir(*it, label);
    if (!st.ok() && !fs::is_directory(*it, ec)) return st;  // lost a race: someone made it
    const fs::path parent = it->parent_path().empty() ? fs::path(".") : it->parent_path();
    KILN_RETURN_IF_ERROR(fsync_dir(parent, label));
  }
  if (!fs::is_directory(dir, ec)) {
    return io_error("cannot use cache directory " + dir.string() + ": not a directory");
  }
  return Status::ok_status();
}

Status fsync_dir(const fs::path& dir, std::string_view label) {
  int err = publish_fault_point(step_name("fsync-dir", label));
  if (err != 0) return errno_status(err, dir.string() + ": fsync failed");
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, dir.string() + ": cannot open directory to fsync");
  UniqueFd guard(fd);
  if (::fsync(fd) != 0) return errno_status(errno, dir.string() + ": fsync failed");
  return Status::ok_status();
}

namespace {

// `created` is set once the file exists, so that the caller removes it on failure.
Status write_all(const fs::path& path, std::span<const uint8_t> bytes, std::string_view label,
                 bool* created) {
  const std::string name = path.string();
  int err = publish_fault_point(step_name("create", label));
  const int fd =
      err != 0 ? -1 : ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(err != 0 ? err : errno, name + ": cannot create");
  *created = true;
  UniqueFd guard(fd);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const std::size_t want = std::min(kWriteChunk, bytes.size() - done);
    err = publish_fault_point(step_name("write", label));
    ssize_t n = -1;
    if (err == 0) {
      n = ::write(fd, bytes.data() + done, want);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) err = errno;
    }
    if (err != 0) {
      return errno_status(err, name + ": write failed after " + std::to_string(done) + " of " +
                                   std::to_string(bytes.size()) + " bytes");
    }
    done += static_cast<std::size_t>(n);  // a short write: loop for the rest
  }
  err = publish_fault_point(step_name("fsync", label));
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (err != 0) return errno_status(err, name + ": fsync failed");
  err = publish_fault_point(step_name("close", label));
  if (err == 0 && ::close(guard.release()) != 0) err = errno;
  if (err != 0) return errno_status(err, name + ": close failed");
  return Status::ok_status();
}

}  // namespace

Status write_file_durable(const fs::path& path, std::span<const uint8_t> bytes,
                          std::string_view label) {
  bool created = false;
  Status st = write_all(path, bytes, label, &created);
  if (!st.ok() && created) {
    std::error_code ec;
    fs::remove(path, ec);  // no partial file left behind
  }
  return st;
}

Status rename_path(const fs::path& from, const fs::path& to, std::string_view label) {
  int err = publish_fault_point(step_name("rename", label));
  if (err == 0 && ::rename(from.c_str(), to.c_str()) != 0) err = errno;
  if (err != 0) return errno_status(err, "cannot rename " + from.string() + " to " + to.string());
  return Status::ok_status();
}

Status remove_tree(const fs::path& p, std::string_view label) {
  const int err = publish_fault_point(step_name("remove", label));
  if (err != 0) return errno_status(err, "cannot remove " + p.string());
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    return errc_status(ec, "cannot remove " + p.string());
  return Status::ok_status();
}

namespace {

Result<UniqueFd> lock_fd(int fd, int op, const fs::path& path) {
  UniqueFd guard(fd);
  while (::flock(guard.get(), op) != 0) {
    if (errno == EWOULDBLOCK && (op & LOCK_NB)) return UniqueFd();
    if (errno != EINTR) return errno_status(errno, "cannot lock " + path.string());
  }
  return guard;
}

}  // namespace

Result<UniqueFd> lock_file(const fs::path& path, LockMode mode, std::string_view label) {
  const int err = publish_fault_point(step_name("lock", label));
  if (err != 0) return errno_status(err, "cannot open lock file " + path.string());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno_status(errno, "cannot open lock file " + path.string());
  return lock_fd(fd, mode == LockMode::kShared ? LOCK_SH : LOCK_EX, path);
}

Result<UniqueFd> lock_dir(const fs::path& dir, std::string_view label) {
  const int err = publish_fault_point(step_name("lock", label));
  if (err != 0) return errno_status(err, "cannot lock directory " + dir.string());
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, "cannot open directory " + dir.string() + " to lock it");
  return lock_fd(fd, LOCK_EX, dir);
}

Result<UniqueFd> try_lock(const fs::path& path, bool create) {
  // O_NONBLOCK: a FIFO swapped in for a stage directory must not block gc.
  const int fd = create ? ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)
                        : ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return errno_status(errno, "cannot open " + path.string() + " to lock it");
  return lock_fd(fd, LOCK_EX | LOCK_NB, path);
}

}  // namespace kiln::cache
