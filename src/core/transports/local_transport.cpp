#include "core/transports/local_transport.h"

#include <cstring>
#include <string>

namespace qc {

LocalGroup::LocalGroup(int nranks, RankScheduler* scheduler)
    : scheduler_(scheduler), departed_(new std::atomic<bool>[nranks]) {
  mailboxes_.reserve(nranks);
  for (int i = 0; i < nranks; ++i) {
    mailboxes_.push_back(std::make_unique<Mailbox>());
    departed_[i].store(false);
  }
}

void LocalGroup::fail(const Status& reason) {
  {
    std::lock_guard<std::mutex> lock(failure_mutex_);
    if (failed_.load(std::memory_order_relaxed)) return;  // the first failure is the cause
    failure_ = reason;
    failed_.store(true, std::memory_order_release);
  }
  wake_everyone();
}

Status LocalGroup::failure() const {
  if (!has_failed()) return Status::ok();
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return failure_;
}

void LocalGroup::depart(int rank) {
  departed_[rank].store(true, std::memory_order_release);
  wake_everyone();
}

void LocalGroup::wake_everyone() {
  for (int r = 0; r < size(); ++r) {
    if (scheduler_ != nullptr) {
      scheduler_->notify(r);
      continue;
    }
    // The news (failed_, departed_) is not written under the mailbox lock:
    // taking it before notifying means a waiter is either before its
    // predicate check (and will see the news) or already asleep.
    Mailbox& box = *mailboxes_[r];
    std::lock_guard<std::mutex> lock(box.mutex);
    box.changed.notify_all();
  }
}

void LocalGroup::notify(int rank) {
  if (scheduler_ != nullptr) {
    scheduler_->notify(rank);
    return;
  }
  // The callers wrote their news under this mailbox's lock, so a waiter
  // that checked before it sleeps already: no lock needed to wake it.
  mailboxes_[rank]->changed.notify_all();
}

void LocalGroup::wait(int rank, std::unique_lock<std::mutex>& lock, Deadline deadline) {
  if (scheduler_ != nullptr) {
    scheduler_->wait(rank, lock, deadline);
    return;
  }
  mailboxes_[rank]->changed.wait_until(lock, deadline);
}

LocalTransport::LocalTransport(std::shared_ptr<LocalGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

LocalTransport::~LocalTransport() { group_->depart(rank_); }

Status LocalTransport::post_send(int peer, uint64_t tag, const void* data, size_t bytes,
                                 size_t frame, Request* req) {
  *req = Request();
  req->kind = Request::Kind::kSend;
  req->peer = peer;
  req->tag = tag;
  req->bytes = bytes;
  req->frame = frame;
  auto state = std::make_shared<LocalGroup::SendState>();
  req->transport_state = state;
  LocalGroup::Mailbox& box = group_->mailbox(peer);
  {
    std::lock_guard<std::mutex> lock(box.mutex);
    box.queue.push_back(
        {rank_, tag, static_cast<const uint8_t*>(data), bytes, frame, std::move(state)});
  }
  group_->notify(peer);
  return Status::ok();
}

Status LocalTransport::post_recv(int peer, uint64_t tag, void* buffer, size_t capacity,
                                 Request* req) {
  *req = Request();
  req->kind = Request::Kind::kRecv;
  req->peer = peer;
  req->tag = tag;
  req->buffer = buffer;
  req->capacity = capacity;
  return Status::ok();
}

Status LocalTransport::try_receive(std::deque<LocalGroup::Message>& queue, Request& req,
                                   std::shared_ptr<LocalGroup::SendState>* consumed_state) {
  // Messages from one sender are consumed strictly in order, so a message
  // with an unexpected tag means the two ranks run different collectives.
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    if (it->source != req.peer) continue;
    if (it->tag != req.tag) {
      return mismatch("rank " + std::to_string(rank_) + " expected message tag " +
                      std::to_string(req.tag) + " from rank " + std::to_string(req.peer) +
                      " but got tag " + std::to_string(it->tag) +
                      ": the ranks are running different collectives");
    }
    if (it->bytes > req.capacity) {
      return mismatch("rank " + std::to_string(req.peer) + " sent " + std::to_string(it->bytes) +
                      " bytes where rank " + std::to_string(rank_) + " expected at most " +
                      std::to_string(req.capacity) + ": the ranks disagree on the collective");
    }
    // Copy before dequeuing: a sender that gives up withdraws only what is
    // still queued, so its buffer is never freed under this copy.
    if (it->bytes > 0) std::memcpy(req.buffer, it->data, it->bytes);
    req.bytes = it->bytes;
    req.frame = it->frame;
    req.done = true;
    *consumed_state = std::move(it->state);
    queue.erase(it);
    return Status::ok();
  }
  return Status::ok();
}

void LocalTransport::signal_consumed(int sender, const std::shared_ptr<LocalGroup::SendState>& state) {
  {
    LocalGroup::Mailbox& box = group_->mailbox(sender);
    std::lock_guard<std::mutex> lock(box.mutex);
    state->consumed = true;
  }
  group_->notify(sender);
}

void LocalTransport::withdraw_sends(Request* reqs, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    Request& req = reqs[i];
    if (req.kind != Request::Kind::kSend || req.done) continue;
    LocalGroup::Mailbox& box = group_->mailbox(req.peer);
    std::lock_guard<std::mutex> lock(box.mutex);
    for (auto it = box.queue.begin(); it != box.queue.end(); ++it) {
      if (it->state == req.transport_state) {
        box.queue.erase(it);
        break;
      }
    }
  }
}

Status LocalTransport::fail_waiting(Request* reqs, size_t count, Status status) {
  withdraw_sends(reqs, count);
  return status;
}

Status LocalTransport::wait_all(Request* reqs, size_t count, Deadline deadline) {
  LocalGroup::Mailbox& own = group_->mailbox(rank_);
  std::unique_lock<std::mutex> lock(own.mutex);
  for (;;) {
    // Progress on everything: receives first, then sends this rank's peers
    // have consumed. Both kinds of news arrive on this mailbox's condvar.
    bool pending = false;
    bool unlocked = false;  // news may have come while the lock was released
    int waiting_on = -1;
    for (size_t i = 0; i < count; ++i) {
      Request& req = reqs[i];
      if (req.done) continue;
      if (req.kind == Request::Kind::kRecv) {
        std::shared_ptr<LocalGroup::SendState> consumed;
        Status s = try_receive(own.queue, req, &consumed);
        if (!s) {
          lock.unlock();
          return fail_waiting(reqs, count, s);
        }
        if (consumed) {
          lock.unlock();  // never hold two mailbox locks at once
          signal_consumed(req.peer, consumed);
          lock.lock();
          unlocked = true;
        }
      } else if (req.kind == Request::Kind::kSend) {
        auto* state = static_cast<LocalGroup::SendState*>(req.transport_state.get());
        // `consumed` is written under the sender's (this rank's) mailbox lock.
        if (state->consumed) req.done = true;
      } else {
        req.done = true;
      }
      if (!req.done) {
        pending = true;
        waiting_on = req.peer;
      }
    }
    if (!pending) return Status::ok();
    if (unlocked) continue;  // rescan before sleeping, or a wakeup could be lost
    if (group_->has_failed()) {
      lock.unlock();
      return fail_waiting(reqs, count, group_->failure());
    }
    for (size_t i = 0; i < count; ++i) {
      if (!reqs[i].done && group_->departed(reqs[i].peer)) {
        lock.unlock();
        return fail_waiting(
            reqs, count,
            transport_error("rank " + std::to_string(reqs[i].peer) +
                            " destroyed its communicator while rank " + std::to_string(rank_) +
                            " still waits for it"));
      }
    }
    if (Clock::now() >= deadline) {
      lock.unlock();
      return fail_waiting(reqs, count,
                          timeout_error("rank " + std::to_string(rank_) +
                                        " timed out waiting for rank " +
                                        std::to_string(waiting_on)));
    }
    group_->wait(rank_, lock, deadline);
  }
}

void LocalTransport::abort(const Status& reason) { group_->fail(reason); }

}  // namespace qc
