#include "tools/runtime_progress.h"

#include <fmt/format.h>

#include <memory>

#include "compiler/progress.h"

namespace kiln::tools {

std::function<void(int64_t, int64_t)> upload_progress_bar() {
  auto bar = std::make_shared<std::unique_ptr<compiler::Progress>>();
  return [bar](int64_t done, int64_t total) {
    if (total <= 0) return;
    if (!*bar) *bar = std::make_unique<compiler::Progress>("uploading weights", 10);
    const int tenths = static_cast<int>(done * 10 / total);
    if (tenths > (*bar)->done())
      (*bar)->update(tenths, fmt::format("{:.1f} of {:.1f} MB", done / 1e6, total / 1e6));
    if (done >= total) bar->reset();  // ends the line
  };
}

std::function<void(int64_t, size_t, size_t)> capture_progress_bar() {
  auto bar = std::make_shared<std::unique_ptr<compiler::Progress>>();
  return [bar](int64_t size, size_t done, size_t total) {
    if (!*bar)
      *bar = std::make_unique<compiler::Progress>("capturing CUDA graphs", static_cast<int>(total));
    (*bar)->update(static_cast<int>(done), fmt::format("size {}", size));
    if (done >= total) bar->reset();
  };
}

}  // namespace kiln::tools
