#include "compiler/progress.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <unistd.h>

#include <cstdio>

#include "compiler/log.h"

namespace kiln::compiler {
namespace {

bool info_enabled() { return logger().should_log(spdlog::level::info); }

// The bar is drawn straight to stderr only where the logger writes its lines there anyway (the
// default logger, compiler/log.cc), and stderr is a terminal.
bool draws_in_place() {
  const auto& sinks = logger().sinks();
  return info_enabled() && isatty(fileno(stderr)) == 1 && sinks.size() == 1 &&
         dynamic_cast<spdlog::sinks::stderr_sink_mt*>(sinks[0].get()) != nullptr;
}

std::string bar(int done, int total) {
  constexpr int kWidth = 20;
  const int filled = total > 0 ? done * kWidth / total : kWidth;
  return "[" + std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(kWidth - filled), '.') + "]";
}

}  // namespace

Progress::Progress(std::string what, int total)
    : what_(std::move(what)),
      total_(total),
      in_place_(draws_in_place()),
      start_(std::chrono::steady_clock::now()) {}

Progress::~Progress() {
  if (drawn_) std::fputc('\n', stderr);
}

std::string Progress::status_text(int done, int total, double elapsed_s) {
  if (done >= total) return fmt::format("{}/{}  {:.1f} s", done, total, elapsed_s);
  if (done <= 0) return fmt::format("{}/{}", done, total);
  const double eta = elapsed_s / done * (total - done);
  return fmt::format("{}/{}  ETA {:.0f} s", done, total, eta);
}

void Progress::update(int done, std::string_view detail, bool log_line) {
  done_ = done;
  if (!info_enabled()) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string status = status_text(done_, total_, elapsed);
  if (!in_place_) {
    if (log_line) logger().info("{} {}  {}", what_, status, detail);
    return;
  }
  // \r and erase-to-end-of-line: the bar, the count and the item, redrawn on one line (the
  // detail cut so the line does not wrap on a narrow terminal).
  std::string line = fmt::format("{} {} {}  {}", what_, bar(done_, total_), status, detail);
  if (line.size() > 160) line = line.substr(0, 157) + "...";
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace kiln::compiler
