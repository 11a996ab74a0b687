#include "compiler/log.h"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>

namespace kiln::compiler {
namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  if (auto existing = spdlog::get(kLoggerName)) return existing;
  auto log = std::make_shared<spdlog::logger>(kLoggerName,
                                              std::make_shared<spdlog::sinks::stderr_sink_mt>());
  log->set_pattern("%v");  // the message alone, as the progress lines always read
  log->set_level(spdlog::level::info);
  spdlog::register_logger(log);
  return log;
}

}  // namespace

spdlog::logger& logger() {
  static const std::shared_ptr<spdlog::logger> log = make_logger();
  return *log;
}

}  // namespace kiln::compiler
