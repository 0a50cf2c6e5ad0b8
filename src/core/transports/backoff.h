// Pauses between polling rounds of a wait: a transport's (MPI, NCCL), or
// the host's for enqueued device work (PendingDeviceWork).
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "core/transports/transport.h"

namespace qc {

// MPI progresses only inside MPI calls, so a
// rank that sleeps also stalls its peers' transfers: poll with yields for the
// first few milliseconds of a wait (messages usually arrive by then), and
// only then sleep, growing to 1 ms, so that a long wait costs little CPU.
class Backoff {
 public:
  void pause() {
    const auto waited = Clock::now() - start_;
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
