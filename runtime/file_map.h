// A read-only memory map of one artifact file (weights, cubins), so large weights are uploaded
// without a second host copy. Errors name the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "cache/status.h"

namespace kiln::runtime {

class FileMap {
 public:
  static Result<std::unique_ptr<FileMap>> open(const std::filesystem::path& path);
  // An artifact file: `rel` opened beneath the artifact directory `dir` in one step, no symlink
  // on the way (cache/open_beneath.h), so a file swapped after verification cannot lead outside.
  static Result<std::unique_ptr<FileMap>> open(const std::filesystem::path& dir,
                                               const std::filesystem::path& rel);
  ~FileMap();
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;

  // Tells the kernel the whole file will be read once, front to back (readahead starts now).
  // Advisory: failures are ignored.
  void will_read_sequentially() const;

  const uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  // The open file (read-only), for pread: several threads may read it at once, and a read
  // into a pinned buffer costs no page-table work, unlike a first touch of the map.
  int fd() const { return fd_; }

 private:
  FileMap(const uint8_t* data, std::size_t size, int fd) : data_(data), size_(size), fd_(fd) {}
  // Maps the open file `fd` (kept open, closed with the map); `path` names it in messages.
  static Result<std::unique_ptr<FileMap>> map_fd(int fd, const std::filesystem::path& path);
  const uint8_t* data_ = nullptr;  // null for an empty file
  std::size_t size_ = 0;
  int fd_ = -1;
};

// Checks the mapped bytes against the manifest's FileEntry: the size always, the XXH3-64 when
// `hash` is set — so what reaches the device is what the manifest describes.
Status file_map_check(const FileMap& map, const std::filesystem::path& path, uint64_t size,
                      uint64_t xxh3, bool hash = true);

}  // namespace kiln::runtime
