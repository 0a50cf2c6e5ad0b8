#include "core/log.h"

#include <sys/syscall.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>

#include "core/params.h"

namespace qc {
namespace {

const char* level_word(LogLevel level) {
  switch (level) {
    case LogLevel::kNone: return "none";
    case LogLevel::kWarn: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
  }
  return "?";
}

struct Sink {
  LogLevel threshold = LogLevel::kWarn;
  FILE* out = stderr;
};

std::string expand_pid(const std::string& path) {
  std::string expanded;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      expanded += std::to_string(static_cast<long>(::getpid()));
      ++i;
    } else {
      expanded += path[i];
    }
  }
  return expanded;
}

// The logger cannot fail a call, so a bad QC_DEBUG only warns here; the same
// value makes communicator creation fail, where the user does get an error.
Sink sink_from_environment() {
  Sink sink;
  const char* name = "QC_DEBUG";
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    name = "QC_LOG_LEVEL";
    text = std::getenv(name);
  }
  if (text != nullptr && *text != '\0') {
    EnvParams parsed;
    const Status s = parse_env_value(name, text, &parsed);
    if (s) {
      sink.threshold = env_log_level(parsed);
    } else {
      std::fprintf(stderr, "qc: warning: %s; using warn\n", s.message().c_str());
    }
  }
  const char* file = std::getenv("QC_DEBUG_FILE");
  if (file != nullptr && *file != '\0' && sink.threshold != LogLevel::kNone) {
    const std::string path = expand_pid(file);
    if (FILE* f = std::fopen(path.c_str(), "a")) {
      sink.out = f;  // never closed: messages may come from static destructors
    } else {
      std::fprintf(stderr, "qc: warning: QC_DEBUG_FILE=\"%s\": cannot open \"%s\" (%s); logging to stderr\n",
                   file, path.c_str(), std::strerror(errno));
    }
  }
  return sink;
}

// The rank this thread's lines name (set_log_rank); -1 prints "-".
thread_local int tls_rank = -1;

// "host:pid:tid", as NCCL_DEBUG's lines start, so that lines of many
// processes and threads in one file can be told apart.
std::string origin() {
  static const std::string host = [] {
    char name[256] = {0};
    if (::gethostname(name, sizeof name - 1) != 0) return std::string("?");
    return std::string(name);
  }();
  return host + ":" + std::to_string(static_cast<long>(::getpid())) + ":" +
         std::to_string(static_cast<long>(::syscall(SYS_gettid)));
}

// UTC wall-clock time to the microsecond, "hh:mm:ss.uuuuuu".
std::string timestamp() {
  struct timeval tv {};
  ::gettimeofday(&tv, nullptr);
  struct tm utc {};
  const time_t seconds = tv.tv_sec;
  ::gmtime_r(&seconds, &utc);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%06ld", utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<long>(tv.tv_usec));
  return buf;
}

const Sink& sink() {
  // Function-local static: initialised once, thread-safely, on first use.
  static const Sink s = sink_from_environment();
  return s;
}

}  // namespace

void set_log_rank(int rank) { tls_rank = rank; }

bool log_enabled(LogLevel level) {
  return level != LogLevel::kNone &&
         static_cast<int>(level) <= static_cast<int>(sink().threshold);
}

void log_message(LogLevel level, const std::string& text) {
  if (!log_enabled(level)) return;
  const Sink& s = sink();
  // One fprintf per line so that lines from concurrent ranks do not
  // interleave; the flush keeps a file's tail when the process dies.
  const std::string rank = tls_rank >= 0 ? std::to_string(tls_rank) : "-";
  const std::string head = timestamp() + " " + origin() + " [" + rank + "]";
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  std::fprintf(s.out, "qc %s %s: %s\n", head.c_str(), level_word(level), text.c_str());
  std::fflush(s.out);
}

}  // namespace qc
