// Diagnostics the library prints on its own: things a user should hear about
// but that are not errors of the current call (an error buffer reset because
// its layer's policy changed, for example), and at info/debug what it chose
// and why. One line each, in one format (like NCCL_DEBUG's):
//   qc 17:30:01.123456 host:pid:tid [rank] info: text
// with the UTC time, and the rank of the communicator the thread is acting
// for ("-" outside a call on one). Levels print as warning, info, debug.
//
// QC_DEBUG (none, warn, info or debug; QC_LOG_LEVEL is its deprecated alias)
// selects what is printed, QC_DEBUG_FILE where (stderr by default); see
// docs/parameters.md. Both are read once, on the first message.
#pragma once

#include <string>

#include "core/log_level.h"

namespace qc {

void log_message(LogLevel level, const std::string& text);
// The rank the calling thread's lines name from now on (-1: none). Set by
// the entry points when they take a communicator, and by a request's run on
// the progress thread; every entry point starts with -1.
void set_log_rank(int rank);
// Lets a caller skip building a debug line nobody will read.
bool log_enabled(LogLevel level);
inline void log_warning(const std::string& text) { log_message(LogLevel::kWarn, text); }
inline void log_info(const std::string& text) { log_message(LogLevel::kInfo, text); }
inline void log_debug(const std::string& text) { log_message(LogLevel::kDebug, text); }

}  // namespace qc
