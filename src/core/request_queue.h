// What runs a communicator's non-blocking collectives (qc_iallreduce and
// friends): one progress thread per communicator, started by its first
// request, that runs the requests one after another in the order they were
// started. Every rank starts its requests in the same order, so every rank
// runs them in the same order, each as the blocking call would, and the
// results are the blocking calls' bit for bit.
//
// Why a thread per communicator: a collective blocks on its peers, so
// progress needs a thread that may block; one per communicator keeps the
// calls of different communicators independent (as MPI's are) and the
// calls of one in order. Without the thread (QC_PROGRESS=inline, or a
// transport that may not be called from another thread: MPI below
// MPI_THREAD_MULTIPLE) a request runs to completion when it is started.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/status.h"

namespace qc {

// One request's outcome, shared by the queue that runs it and the handle
// that names it (which may be freed first, or outlive the communicator).
class RequestState {
 public:
  explicit RequestState(uint64_t number) : number_(number) {}
  uint64_t number() const { return number_; }
  // Blocks until the request has run; its status.
  Status wait();
  // Whether it has run (never blocks); *status is its status then.
  bool test(Status* status);
  void complete(const Status& status);

 private:
  const uint64_t number_;  // 1 for a communicator's first request
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  Status status_;
};

class RequestQueue {
 public:
  using Task = std::function<Status()>;

  RequestQueue() = default;
  ~RequestQueue() { shut_down(0.0, nullptr, Status::ok()); }
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // Starts `task` after every task started before it: on the progress
  // thread, or now on this one (`inline_run`). A task never runs once an
  // earlier one has failed: it completes with that failure instead.
  std::shared_ptr<RequestState> start(Task task, bool inline_run);
  // Returns once every task started so far has finished: a blocking call or
  // a policy change comes after the requests started before it.
  void drain();
  // For the communicator's destruction: waits up to `seconds` for the tasks
  // started so far; if some are left, calls `interrupt` (which makes the
  // running one fail soon) and completes the queued ones with `reason`
  // without running them; then joins the thread. Idempotent.
  void shut_down(double seconds, const std::function<void()>& interrupt, const Status& reason);

 private:
  void run_thread();
  // Runs one task, or fails it after an earlier failure; records failures.
  // The task is released before the request completes.
  void run_one(Task& task, RequestState& state);

  struct Entry {
    Task task;
    std::shared_ptr<RequestState> state;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Entry> queued_;
  bool running_ = false;   // the thread is running a task
  bool stopping_ = false;
  std::thread thread_;
  uint64_t started_ = 0;
  // The first failed request: every later one fails with it.
  Status failed_;
  uint64_t failed_number_ = 0;
};

}  // namespace qc
