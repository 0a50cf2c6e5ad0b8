// log.cpp - see log.h.
#include "log.h"

#include <sys/time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

namespace qc_torch {
namespace {

LogLevel level_from_environment() {
  const char* value = std::getenv("QC_DEBUG");
  if (value == nullptr) value = std::getenv("QC_LOG_LEVEL");
  if (value == nullptr) return LogLevel::kWarn;
  const char* names[] = {"none", "warn", "info", "debug"};
  for (int i = 0; i < 4; ++i) {
    if (std::strcmp(value, names[i]) == 0 || (value[0] == '0' + i && value[1] == '\0')) {
      return static_cast<LogLevel>(i);
    }
  }
  return LogLevel::kWarn;  // libqc warns about a bad value itself
}

const char* level_word(LogLevel level) {
  switch (level) {
    case LogLevel::kWarn: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    default: return "";
  }
}

}  // namespace

bool log_enabled(LogLevel level) {
  // Read at every line (lines are rare: a fallback's first call, warnings),
  // so a process may change QC_DEBUG between process groups.
  const LogLevel threshold = level_from_environment();
  return level != LogLevel::kNone && static_cast<int>(level) <= static_cast<int>(threshold);
}

void log_line(LogLevel level, int rank, const std::string& text) {
  if (!log_enabled(level)) return;
  struct timeval tv;
  ::gettimeofday(&tv, nullptr);
  std::time_t seconds = tv.tv_sec;
  std::tm utc;
  ::gmtime_r(&seconds, &utc);
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "qc %02d:%02d:%02d.%06ld torch [%d] %s: %s\n", utc.tm_hour, utc.tm_min,
               utc.tm_sec, static_cast<long>(tv.tv_usec), rank, level_word(level), text.c_str());
  std::fflush(stderr);
}

}  // namespace qc_torch
