#include "cache/file_hash.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace kiln::cache {

namespace {
constexpr std::size_t kChunkBytes = std::size_t{1} << 20;  // 1 MiB

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};
}  // namespace

uint64_t hash64(const void* data, std::size_t size) { return XXH3_64bits(data, size); }

std::string hash128_hex(std::string_view data) {
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return std::string(buf, 32);
}

Result<FileDigest> file_digest(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    std::string msg = path.string() + ": cannot open for hashing: " + std::strerror(err);
    if (err == ENOENT) return not_found(std::move(msg));
    return io_error(std::move(msg));
  }
  FdCloser closer{fd};

  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  if (!state || XXH3_64bits_reset(state.get()) == XXH_ERROR)
    return internal_error(path.string() + ": cannot create an XXH3 hash state");

  std::vector<unsigned char> buf(kChunkBytes);
  FileDigest digest;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error(path.string() + ": read failed after " + std::to_string(digest.size) +
                      " bytes: " + std::strerror(errno));
    }
    if (n == 0) break;
    if (XXH3_64bits_update(state.get(), buf.data(), static_cast<std::size_t>(n)) == XXH_ERROR)
      return internal_error(path.string() + ": XXH3 update failed");
    digest.size += static_cast<uint64_t>(n);
  }
  digest.xxh3 = XXH3_64bits_digest(state.get());
  return digest;
}

}  // namespace kiln::cache
