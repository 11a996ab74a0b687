// ONNX external tensor data (data_location EXTERNAL): the location is validated (relative, no
// "..", resolves under the model folder, no symlink or hard-link escape) and opened beneath the
// model folder in one step (openat2 RESOLVE_BENEATH, cache/open_beneath.h), without blocking on a
// FIFO or device (only regular files are read); offset and length are checked against the file,
// and every size limit (a cap on the tensor, the import's total budget) is checked before a byte
// is read or allocated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cache/status.h"
#include "onnx/onnx_pb.h"

namespace kiln::compiler {

// What one import may read from external data: at most `max_bytes` in total, or (0) at most the
// total size of the distinct files it opened, so an import never holds more external bytes than
// its files do. Every copy counts: initializers that name the same region with the same type and
// shape are one constant, read once (the importer asks external_region_key), but a region read
// again (as another type or shape, or by a tensor attribute) is another copy in the IR; the
// error then names the tensor that first used the region.
class ExternalDataBudget {
 public:
  explicit ExternalDataBudget(uint64_t max_bytes = 0) : max_bytes_(max_bytes) {}

  // Counts `bytes` of file (dev, ino, size) at `offset` for tensor `tensor`, or refuses them.
  // `what` and `location` name the tensor and the file in the message.
  Status charge(uint64_t dev, uint64_t ino, uint64_t file_size, uint64_t offset, uint64_t bytes,
                const std::string& tensor, const std::string& what, const std::string& location);
  uint64_t used() const { return used_; }
  uint64_t limit() const { return max_bytes_ != 0 ? max_bytes_ : files_bytes_; }

 private:
  uint64_t max_bytes_ = 0;
  uint64_t files_bytes_ = 0;  // total size of the distinct files seen
  uint64_t used_ = 0;
  std::set<std::pair<uint64_t, uint64_t>> files_;  // (dev, ino)
  // (dev, ino, offset, length) -> the first tensor reading it, and how many do.
  std::map<std::tuple<uint64_t, uint64_t, uint64_t, uint64_t>, std::pair<std::string, uint64_t>>
      regions_;
};

// What identifies the bytes an EXTERNAL tensor names, for de-duplication: its element type,
// dims, normalised location, offset and length (none given: the dims' size). Tensors with equal
// keys hold equal bytes. nullopt when `t` is not external or its keys are malformed
// (external_data_read then says what is wrong).
std::optional<std::string> external_region_key(const onnx::TensorProto& t);

// Reads the data of `t` (named `name` in messages). `expected_bytes` is numel * dtype size;
// a `length` key that disagrees with it is an error. Messages name the tensor and the file.
// With a `budget`, the bytes are charged to it before they are allocated.
Result<std::vector<uint8_t>> external_data_read(const onnx::TensorProto& t, const std::string& name,
                                                const std::filesystem::path& base_dir,
                                                uint64_t expected_bytes,
                                                ExternalDataBudget* budget = nullptr);

}  // namespace kiln::compiler
