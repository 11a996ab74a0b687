// An empty directory for a fuzz target: where external data named by a fuzzed ONNX model or
// TensorProto resolves (beneath it there is nothing to find). Made once per process.
#pragma once

#include <filesystem>
#include <string>

namespace kiln::fuzz {

inline const std::filesystem::path& scratch_dir(const std::string& target) {
  static const std::filesystem::path dir = [&] {
    auto d = std::filesystem::temp_directory_path() / ("kiln-fuzz-" + target);
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

}  // namespace kiln::fuzz
