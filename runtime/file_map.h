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
  ~FileMap();
  FileMap(const FileMap&) = delete;
  FileMap& operator=(const FileMap&) = delete;

  const uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  FileMap(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  const uint8_t* data_ = nullptr;  // null for an empty file
  std::size_t size_ = 0;
};

// Re-checks the bytes against the manifest's FileEntry for `rel_path` (size and XXH3-64), so
// that what reaches the device is what artifact_verify checked.
Status file_map_check(const FileMap& map, const std::filesystem::path& path, uint64_t size,
                      uint64_t xxh3);

}  // namespace kiln::runtime
