#include "runtime/file_map.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "cache/file_hash.h"
#include "cache/open_beneath.h"

namespace kiln::runtime {

Result<std::unique_ptr<FileMap>> FileMap::open(const std::filesystem::path& path) {
  // O_NONBLOCK: a FIFO must not block the open; fstat below refuses it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  return map_fd(fd < 0 ? -errno : fd, path);
}

Result<std::unique_ptr<FileMap>> FileMap::open(const std::filesystem::path& dir,
                                               const std::filesystem::path& rel) {
  return map_fd(cache::open_beneath(dir, rel, cache::BeneathSymlinks::kRefuse), dir / rel);
}

Result<std::unique_ptr<FileMap>> FileMap::map_fd(int fd, const std::filesystem::path& path) {
  if (fd < 0) {
    const int err = -fd;
    std::string message = "cannot open '" + path.string() + "': " + std::strerror(err);
    if (err == ELOOP || err == EXDEV)
      return data_loss(message + " (a symlink, or a path leading outside the artifact)");
    return err == ENOENT ? not_found(message) : io_error(message);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return io_error("cannot stat '" + path.string() + "': " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("'" + path.string() + "' is not a regular file");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size == 0) return std::unique_ptr<FileMap>(new FileMap(nullptr, 0, fd));
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot map '" + path.string() + "' (" + std::to_string(size) +
                    " bytes): " + std::strerror(err));
  }
  return std::unique_ptr<FileMap>(new FileMap(static_cast<const uint8_t*>(p), size, fd));
}

void FileMap::will_read_sequentially() const {
  if (data_ == nullptr) return;
  auto* p = const_cast<uint8_t*>(data_);
  (void)::madvise(p, size_, MADV_SEQUENTIAL);
  (void)::madvise(p, size_, MADV_WILLNEED);
}

FileMap::~FileMap() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

Status file_map_check(const FileMap& map, const std::filesystem::path& path, uint64_t size,
                      uint64_t xxh3, bool hash) {
  if (map.size() != size)
    return data_loss("'" + path.string() + "' is " + std::to_string(map.size()) +
                     " bytes, the manifest says " + std::to_string(size) +
                     " (changed after verification?)");
  if (hash && cache::hash64(map.data(), map.size()) != xxh3)
    return data_loss("'" + path.string() +
                     "' does not match its XXH3-64 in the manifest (changed after verification?)");
  return Status::ok_status();
}

}  // namespace kiln::runtime
