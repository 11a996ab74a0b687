#include "runtime/log.h"

#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

namespace kiln::runtime {
namespace {

std::mutex& log_mutex() {
  static std::mutex mu;
  return mu;
}

LogSink& log_sink() {
  static LogSink sink;
  return sink;
}

}  // namespace

LogSink log_set_sink(LogSink sink) {
  std::lock_guard<std::mutex> lock(log_mutex());
  return std::exchange(log_sink(), std::move(sink));
}

void log_warning(std::string_view message) {
  std::string line = "kiln: " + std::string(message);
  std::lock_guard<std::mutex> lock(log_mutex());
  if (log_sink()) {
    log_sink()(line);
    return;
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace kiln::runtime
