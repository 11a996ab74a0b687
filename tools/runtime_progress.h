// The runtime's progress callbacks (LoadOptions::upload_progress, ExecutorOptions and
// GeneratorOptions::capture_progress) shown as the compiler's progress is (compiler/progress.h):
// a bar with counts and an ETA on a terminal, plain lines otherwise, nothing with -q.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace kiln::tools {

// "uploading weights [####....] 4/10  ETA 1 s  680 of 1700 MB", in tenths of the bytes.
std::function<void(int64_t bytes_done, int64_t bytes_total)> upload_progress_bar();

// "capturing CUDA graphs [###.....] 3/8  ETA 1 s  size 16".
std::function<void(int64_t size, size_t done, size_t total)> capture_progress_bar();

}  // namespace kiln::tools
