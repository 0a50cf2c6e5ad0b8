#include "core/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace qc {
namespace {

LogLevel level_from_environment() {
  const char* v = std::getenv("QC_LOG_LEVEL");
  if (v == nullptr || *v == '\0') return LogLevel::kWarn;
  if (std::strcmp(v, "none") == 0 || std::strcmp(v, "0") == 0) return LogLevel::kNone;
  if (std::strcmp(v, "info") == 0 || std::strcmp(v, "2") == 0) return LogLevel::kInfo;
  if (std::strcmp(v, "warn") == 0 || std::strcmp(v, "1") == 0) return LogLevel::kWarn;
  std::fprintf(stderr, "qc: warning: QC_LOG_LEVEL=\"%s\" is not none, warn or info; using warn\n",
               v);
  return LogLevel::kWarn;
}

}  // namespace

void log_message(LogLevel level, const std::string& text) {
  // Function-local static: initialised once, thread-safely, on first use.
  static const LogLevel threshold = level_from_environment();
  if (level == LogLevel::kNone || static_cast<int>(level) > static_cast<int>(threshold)) return;
  // One fprintf per line so that lines from concurrent ranks do not interleave.
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(stderr, "qc: %s: %s\n", level == LogLevel::kWarn ? "warning" : "info",
               text.c_str());
}

}  // namespace qc
