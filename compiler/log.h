// The compiler's log. Library code (the autotuners' progress lines and warnings) never prints:
// it logs through one spdlog logger named "kiln", which writes each message as it is, one line on
// stderr. The level is the caller's: `kiln` shows info (progress) by default, debug with -v and
// only warnings and errors with -q. The runtime keeps its own sink (runtime/log.h): it must not
// depend on spdlog.
#pragma once

#include <spdlog/logger.h>

namespace kiln::compiler {

inline constexpr const char* kLoggerName = "kiln";

// The logger: the one registered with spdlog under kLoggerName, if an application registered
// one before the compiler's first message (to send the lines elsewhere); otherwise one that
// writes the bare message to stderr, at level info, created and registered on first use.
spdlog::logger& logger();

}  // namespace kiln::compiler
