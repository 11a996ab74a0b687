// The runtime's one log line: warnings such as a downgraded graph mode or an eager fallback.
// A settable sink (default: a line on stderr); no logging library, nothing on the hot path.
#pragma once

#include <functional>
#include <string_view>

namespace kiln::runtime {

using LogSink = std::function<void(std::string_view line)>;

// Replaces the sink for all later messages; an empty function restores the stderr default.
// Returns the previous sink. Thread-safe.
LogSink log_set_sink(LogSink sink);

// "kiln: <message>" to the sink. Thread-safe.
void log_warning(std::string_view message);

}  // namespace kiln::runtime
