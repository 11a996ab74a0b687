#include "cache/file_hash.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "cache/open_beneath.h"

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

Result<FileDigest> digest_fd(int fd, const std::filesystem::path& path, uint64_t block_bytes);
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
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  return digest_fd(fd < 0 ? -errno : fd, path, 0);
}

Result<FileDigest> file_digest_beneath(const std::filesystem::path& dir,
                                       const std::filesystem::path& rel, uint64_t block_bytes) {
  return digest_fd(open_beneath(dir, rel, BeneathSymlinks::kRefuse), dir / rel, block_bytes);
}

namespace {

Result<FileDigest> digest_fd(int fd, const std::filesystem::path& path, uint64_t block_bytes) {
  if (fd < 0) {
    const int err = -fd;
    std::string msg = path.string() + ": cannot open for hashing: " + std::strerror(err);
    if (err == ENOENT) return not_found(std::move(msg));
    if (err == ELOOP || err == EXDEV)
      return data_loss(path.string() +
                       ": is or passes through a symlink, or leads outside its "
                       "directory; artifact files must be regular files");
    return io_error(std::move(msg));
  }
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return io_error(path.string() + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return data_loss(path.string() + ": not a regular file");

  std::unique_ptr<XXH3_state_t, StateDeleter> state(XXH3_createState());
  std::unique_ptr<XXH3_state_t, StateDeleter> block(XXH3_createState());
  if (!state || !block || XXH3_64bits_reset(state.get()) == XXH_ERROR ||
      XXH3_64bits_reset(block.get()) == XXH_ERROR)
    return internal_error(path.string() + ": cannot create an XXH3 hash state");
  uint64_t in_block = 0;  // bytes of the current block hashed so far

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
    // The same bytes, cut at block boundaries.
    for (std::size_t at = 0; block_bytes != 0 && at < static_cast<std::size_t>(n);) {
      const auto take = static_cast<std::size_t>(
          std::min<uint64_t>(block_bytes - in_block, static_cast<uint64_t>(n) - at));
      if (XXH3_64bits_update(block.get(), buf.data() + at, take) == XXH_ERROR)
        return internal_error(path.string() + ": XXH3 update failed");
      at += take;
      in_block += take;
      if (in_block == block_bytes) {
        digest.blocks.push_back(XXH3_64bits_digest(block.get()));
        (void)XXH3_64bits_reset(block.get());
        in_block = 0;
      }
    }
  }
  if (in_block != 0) digest.blocks.push_back(XXH3_64bits_digest(block.get()));
  digest.xxh3 = XXH3_64bits_digest(state.get());
  return digest;
}

}  // namespace

}  // namespace kiln::cache
