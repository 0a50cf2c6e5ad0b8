// Virtual ranks as fibers: an emulation's N ranks run the real code of a
// rank (paper 000 3.2: bit for bit what a real run computes), each on a
// small stack of its own, all on a few threads (one per core). A rank that
// must wait for a peer hands its thread to another rank that can run,
// instead of sleeping in the kernel, so a 128-rank emulation on 2 cores
// costs the arithmetic and not 128 threads handing messages to each other
// (issue 36). The ranks talk through a local group whose waits go through
// this scheduler (LocalGroup's RankScheduler).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "core/transports/local_transport.h"

namespace qc {

class FiberRanks final : public RankScheduler {
 public:
  // `nranks` fibers on `threads` threads (0: one per core, at most one per
  // rank); the caller's thread is one of them.
  FiberRanks(int nranks, int threads);
  ~FiberRanks() override;
  FiberRanks(const FiberRanks&) = delete;
  FiberRanks& operator=(const FiberRanks&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }

  // Runs body(r) for every rank r, each on its fiber, and returns their
  // statuses by rank (an exception thrown by a body is its internal error).
  // Once: a FiberRanks runs one group of ranks.
  Status run(const std::function<Status(int)>& body, std::vector<Status>* results);

  void wait(int rank, std::unique_lock<std::mutex>& lock, Deadline deadline) override;
  void notify(int rank) override;

  struct Fiber;
  struct Worker;

 private:
  static void enter(unsigned lo, unsigned hi);  // ucontext's entry
  static void enter_fiber(void* fiber);         // the x86-64 switch's
  void work(int worker);
  void run_fiber(Fiber& f);

  std::vector<std::unique_ptr<Fiber>> fibers_;
  std::vector<std::unique_ptr<Worker>> workers_;
  const std::function<Status(int)>* body_ = nullptr;
  std::mutex mutex_;  // every fiber's state and every worker's ready queue
};

}  // namespace qc
