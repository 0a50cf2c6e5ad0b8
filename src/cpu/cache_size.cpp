#include "cpu/cache_size.h"

#include <unistd.h>

#include <atomic>

namespace qc {
namespace cpu {
namespace {

size_t reported(int name) {
  const long v = name >= 0 ? sysconf(name) : -1;
  return v > 0 ? static_cast<size_t>(v) : 0;
}

size_t read_last_level_cache() {
  int l3 = -1, l2 = -1;
#ifdef _SC_LEVEL3_CACHE_SIZE
  l3 = _SC_LEVEL3_CACHE_SIZE;
#endif
#ifdef _SC_LEVEL2_CACHE_SIZE
  l2 = _SC_LEVEL2_CACHE_SIZE;
#endif
  if (size_t b = reported(l3)) return b;
  if (size_t b = reported(l2)) return b;
  return size_t{32} << 20;
}

// Set only by tests (set_last_level_cache_bytes_for_testing); atomic, as
// a test's ranks read it from several threads.
std::atomic<size_t> g_testing_bytes{0};

}  // namespace

size_t last_level_cache_bytes() {
  const size_t testing = g_testing_bytes.load(std::memory_order_relaxed);
  if (testing != 0) return testing;
  static const size_t bytes = read_last_level_cache();  // thread-safe once
  return bytes;
}

void set_last_level_cache_bytes_for_testing(size_t bytes) {
  g_testing_bytes.store(bytes, std::memory_order_relaxed);
}

bool outgrows_cache(size_t bytes) { return bytes > last_level_cache_bytes() / 2; }

}  // namespace cpu
}  // namespace qc
