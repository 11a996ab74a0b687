// Opening a file beneath a directory without a race between checking the path and opening it:
// openat2(2) with RESOLVE_BENEATH (and RESOLVE_NO_SYMLINKS when symlinks are refused), so the
// kernel itself refuses `..`, absolute paths and symlinks that lead out of the directory. Where
// openat2 is unavailable (ENOSYS on kernels before 5.6, EPERM under some seccomp filters) a
// fallback gives the same answers: a walk one component at a time with O_NOFOLLOW (symlinks
// refused), or a canonical-path check and an O_NOFOLLOW open (symlinks inside allowed).
// Every open is O_RDONLY | O_CLOEXEC | O_NONBLOCK, so a FIFO or a device never blocks the
// caller; check fstat's S_ISREG before reading.
#pragma once

#include <filesystem>

namespace kiln::cache {

enum class BeneathSymlinks {
  kRefuse,  // any symlink on the way (or at the end) fails with ELOOP
  kInside,  // symlinks are followed while they stay beneath the directory
};

enum class BeneathMethod {
  kAuto,      // openat2 when the kernel allows it, else the fallback
  kFallback,  // the fallback only (tests of the fallback)
};

// Opens `rel` (relative) beneath the directory `dir`. Returns a file descriptor the caller closes,
// or -errno: EXDEV when `rel` is absolute or leads out of `dir` (through `..` or a symlink),
// ELOOP for a refused symlink, ENOENT, EACCES, ... as open(2).
int open_beneath(const std::filesystem::path& dir, const std::filesystem::path& rel,
                 BeneathSymlinks symlinks, BeneathMethod method = BeneathMethod::kAuto);

// Whether openat2 works here (probed once); false means open_beneath uses the fallback.
bool openat2_available();

}  // namespace kiln::cache
