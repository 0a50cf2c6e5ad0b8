// Diagnostics the library prints on its own: things a user should hear about
// but that are not errors of the current call (an error buffer reset because
// its layer's policy changed, for example). Lines go to stderr as
// "qc: warning: ..." / "qc: info: ...".
//
// QC_LOG_LEVEL selects what is printed: "none", "warn" (the default) or
// "info". It is read once, on the first message.
#pragma once

#include <string>

namespace qc {

enum class LogLevel { kNone = 0, kWarn = 1, kInfo = 2 };

void log_message(LogLevel level, const std::string& text);
inline void log_warning(const std::string& text) { log_message(LogLevel::kWarn, text); }
inline void log_info(const std::string& text) { log_message(LogLevel::kInfo, text); }

}  // namespace qc
