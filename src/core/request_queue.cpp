#include "core/request_queue.h"

#include <chrono>
#include <string>

#include "core/transports/backoff.h"

namespace qc {

Status RequestState::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  return status_;
}

bool RequestState::test(Status* status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_) *status = status_;
  return done_;
}

void RequestState::complete(const Status& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  status_ = status;
  done_ = true;
  done_cv_.notify_all();
}

std::shared_ptr<RequestState> RequestQueue::start(Task task, bool inline_run) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto state = std::make_shared<RequestState>(++started_);
  if (inline_run && queued_.empty() && !running_) {
    lock.unlock();
    run_one(task, *state);
    return state;
  }
  queued_.push_back(Entry{std::move(task), state});
  if (!thread_.joinable() && !stopping_) thread_ = std::thread([this] { run_thread(); });
  changed_.notify_all();
  if (inline_run) {
    // Queued behind requests a progress thread still runs: wait for it.
    lock.unlock();
    state->wait();
  }
  return state;
}

void RequestQueue::run_one(Task& task, RequestState& state) {
  Status earlier;
  uint64_t earlier_number = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    earlier = failed_;
    earlier_number = failed_number_;
  }
  if (!earlier) {
    task = nullptr;
    state.complete(Status(earlier.code(),
                          "request " + std::to_string(state.number()) +
                              " did not run: request " + std::to_string(earlier_number) +
                              " on this communicator failed before it (" + earlier.message() +
                              ")"));
    return;
  }
  Status s;
  try {
    s = task();
  } catch (const std::bad_alloc&) {
    s = Status(QC_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    s = internal_error(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    s = internal_error("unexpected non-standard exception");
  }
  // What the task holds (an error buffer's lease) goes before the request
  // is seen done: a caller that waited may use the buffer at once.
  task = nullptr;
  if (!s) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) {
      failed_ = s;
      failed_number_ = state.number();
    }
  }
  state.complete(s);
}

void RequestQueue::run_thread() {
  // Its caller goes on computing: waits here leave it the cores.
  set_background_waits(true);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queued_.empty(); });
    if (queued_.empty()) return;  // stopping, nothing left
    Entry e = std::move(queued_.front());
    queued_.pop_front();
    running_ = true;
    lock.unlock();
    run_one(e.task, *e.state);
    lock.lock();
    running_ = false;
    changed_.notify_all();
  }
}

void RequestQueue::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queued_.empty() && !running_; });
}

void RequestQueue::shut_down(double seconds, const std::function<void()>& interrupt,
                             const Status& reason) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto idle = [&] { return queued_.empty() && !running_; };
  if (!idle() && seconds > 0) {
    changed_.wait_for(lock, std::chrono::duration<double>(seconds), idle);
  }
  if (!idle()) {
    if (interrupt) interrupt();
    std::deque<Entry> left;
    left.swap(queued_);
    for (Entry& e : left) {
      e.state->complete(Status(reason.code(), "request " + std::to_string(e.state->number()) +
                                                  " did not run: " + reason.message()));
    }
  }
  stopping_ = true;
  changed_.notify_all();
  lock.unlock();
  if (thread_.joinable()) thread_.join();
}

}  // namespace qc
