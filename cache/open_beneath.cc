#include "cache/open_beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <string>
#include <system_error>
#include <vector>

namespace kiln::cache {

namespace fs = std::filesystem;

namespace {

constexpr int kOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

// 1: openat2 works, 0: unavailable, -1: not probed yet.
std::atomic<int> g_openat2{-1};

// Closes a file descriptor on scope exit unless released.
struct DirFd {
  int fd = -1;
  ~DirFd() {
    if (fd >= 0) ::close(fd);
  }
};

int neg_errno() { return errno > 0 ? -errno : -EIO; }

int open_dir(const fs::path& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  return fd >= 0 ? fd : neg_errno();
}

// openat2; -ENOSYS (or -EPERM from a seccomp filter) says it is unavailable.
int try_openat2(int dirfd, const fs::path& rel, BeneathSymlinks symlinks) {
  open_how how{};
  how.flags = static_cast<uint64_t>(kOpenFlags) |
              (symlinks == BeneathSymlinks::kRefuse ? static_cast<uint64_t>(O_NOFOLLOW) : 0);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
                (symlinks == BeneathSymlinks::kRefuse ? RESOLVE_NO_SYMLINKS : 0);
  for (;;) {
    const long fd = ::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno == EINTR || errno == EAGAIN) continue;
    return neg_errno();
  }
}

// Symlinks refused: one component at a time, each directory opened with O_NOFOLLOW beneath the
// previous one, so nothing can be swapped in between.
int walk_no_symlinks(int dirfd, const fs::path& rel) {
  std::vector<std::string> parts;
  for (const fs::path& p : rel) {
    const std::string s = p.string();
    if (s.empty() || s == ".") continue;
    if (s == "..") return -EXDEV;
    parts.push_back(s);
  }
  if (parts.empty()) return -EISDIR;
  DirFd cur{::fcntl(dirfd, F_DUPFD_CLOEXEC, 0)};
  if (cur.fd < 0) return neg_errno();
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    struct stat st {};
    if (::fstatat(cur.fd, parts[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return neg_errno();
    if (S_ISLNK(st.st_mode)) return -ELOOP;
    const int next =
        ::openat(cur.fd, parts[i].c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0) return neg_errno();
    ::close(cur.fd);
    cur.fd = next;
  }
  const int fd = ::openat(cur.fd, parts.back().c_str(), kOpenFlags | O_NOFOLLOW);
  return fd >= 0 ? fd : neg_errno();
}

// Symlinks inside allowed: the canonical path must stay under the canonical directory; the
// target itself is then opened with O_NOFOLLOW (a symlink swapped in afterwards fails).
int canonical_inside(const fs::path& dir, const fs::path& rel) {
  for (const fs::path& p : rel)
    if (p == "..") return -EXDEV;
  std::error_code ec;
  const fs::path base = fs::canonical(dir.empty() ? fs::path(".") : dir, ec);
  if (ec) return -ec.value();
  const fs::path resolved = fs::canonical(base / rel, ec);
  if (ec) return -ec.value();
  const fs::path inside = resolved.lexically_relative(base);
  if (inside.empty() || inside == "." || *inside.begin() == "..") return -EXDEV;
  const int fd = ::open(resolved.c_str(), kOpenFlags | O_NOFOLLOW);
  return fd >= 0 ? fd : neg_errno();
}

}  // namespace

bool openat2_available() {
  int known = g_openat2.load();
  if (known >= 0) return known == 1;
  const int fd = try_openat2(AT_FDCWD, ".", BeneathSymlinks::kInside);
  known = (fd >= 0 || (fd != -ENOSYS && fd != -EPERM)) ? 1 : 0;
  if (fd >= 0) ::close(fd);
  g_openat2.store(known);
  return known == 1;
}

int open_beneath(const fs::path& dir, const fs::path& rel, BeneathSymlinks symlinks,
                 BeneathMethod method) {
  if (rel.empty()) return -ENOENT;
  if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory()) return -EXDEV;
  if (method == BeneathMethod::kAuto && openat2_available()) {
    DirFd d{open_dir(dir)};
    if (d.fd < 0) return d.fd;
    const int fd = try_openat2(d.fd, rel, symlinks);
    if (fd != -ENOSYS && fd != -EPERM) return fd;
    // A seccomp filter may refuse openat2 later than the probe: use the fallback.
  }
  if (symlinks == BeneathSymlinks::kInside) return canonical_inside(dir, rel);
  DirFd d{open_dir(dir)};
  if (d.fd < 0) return d.fd;
  return walk_no_symlinks(d.fd, rel);
}

}  // namespace kiln::cache
