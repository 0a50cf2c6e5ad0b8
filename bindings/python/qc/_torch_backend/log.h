// log.h - the backend's log lines, in the shape of libqc's own
// ("qc <UTC time> torch [<rank>] <level>: <text>"), gated by QC_DEBUG as the
// library is (docs/parameters.md: none, warn, info, debug or 0..3).
#pragma once

#include <string>

namespace qc_torch {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

// Whether QC_DEBUG asks for lines of `level` (read at each call).
bool log_enabled(LogLevel level);

// One line on stderr (one write, flushed), when log_enabled(level).
void log_line(LogLevel level, int rank, const std::string& text);

}  // namespace qc_torch
