// Pauses between polling rounds of a wait: a transport's (MPI, NCCL), or
// the host's for enqueued device work (PendingDeviceWork).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/transports/transport.h"

namespace qc {

// Whether this thread waits on behalf of a caller that goes on computing:
// qc's progress thread (request_queue.cpp), whose caller may be in a DDP
// backward pass on the same cores. Per thread, set once by the thread.
inline thread_local bool tls_background_waits = false;
inline void set_background_waits(bool on) { tls_background_waits = on; }

// MPI progresses only inside MPI calls, so a
// rank that sleeps also stalls its peers' transfers: poll with yields for the
// first few milliseconds of a wait (messages usually arrive by then), and
// only then sleep, growing to 1 ms, so that a long wait costs little CPU.
// A background wait leaves the core to the caller's own work instead: it
// polls for 20 us, then sleeps 20 us growing to 250 us between polls (a
// 1 Gbit/s link moves 31 KB in 250 us, well within a socket's buffer, so
// the link stays busy; a blocking wait's yields would take half a core
// from the caller for as long as the transfer lasts).
class Backoff {
 public:
  void pause() {
    const auto waited = Clock::now() - start_;
    if (tls_background_waits) {
      if (waited < std::chrono::microseconds(20)) return;
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
      sleep_us_ = std::min(250, sleep_us_ * 2);
      return;
    }
    // Small messages complete within microseconds if we keep driving MPI's
    // progress; even a yield (a system call) would double their latency.
    if (waited < std::chrono::microseconds(200)) return;
    if (waited < std::chrono::milliseconds(5)) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    sleep_us_ = std::min(1000, sleep_us_ * 2);
  }

 private:
  Clock::time_point start_ = Clock::now();
  int sleep_us_ = 20;
};

}  // namespace qc
