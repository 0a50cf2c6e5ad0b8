#include "core/transports/local_transport.h"

#include <cstring>
#include <string>

namespace qc {

LocalGroup::LocalGroup(int nranks) : departed_(new std::atomic<bool>[nranks]) {
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
  // Taking each lock before notifying means a waiter is either before its
  // predicate check (and will see the new state) or already asleep.
  for (auto& box : mailboxes_) {
    std::lock_guard<std::mutex> lock(box->mutex);
    box->arrived.notify_all();
  }
}

LocalTransport::LocalTransport(std::shared_ptr<LocalGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {}

LocalTransport::~LocalTransport() { group_->depart(rank_); }

Status LocalTransport::post_send(int peer, uint64_t tag, const void* data, size_t bytes,
                                 Request* req) {
  LocalGroup::Message message;
  message.source = rank_;
  message.tag = tag;
  message.bytes.resize(bytes);
  if (bytes > 0) std::memcpy(message.bytes.data(), data, bytes);
  LocalGroup::Mailbox& box = group_->mailbox(peer);
  {
    std::lock_guard<std::mutex> lock(box.mutex);
    box.queue.push_back(std::move(message));
  }
  box.arrived.notify_all();
  *req = Request();
  req->kind = Request::Kind::kSend;
  req->peer = peer;
  req->tag = tag;
  req->bytes = bytes;
  req->done = true;
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

Status LocalTransport::wait_recv(Request& req, Deadline deadline) {
  LocalGroup::Mailbox& box = group_->mailbox(rank_);
  std::unique_lock<std::mutex> lock(box.mutex);
  for (;;) {
    // Messages from one sender are consumed strictly in order, so a message
    // with an unexpected tag means the two ranks run different collectives.
    for (auto it = box.queue.begin(); it != box.queue.end(); ++it) {
      if (it->source != req.peer) continue;
      if (it->tag != req.tag) {
        return mismatch("rank " + std::to_string(rank_) + " expected message tag " +
                        std::to_string(req.tag) + " from rank " + std::to_string(req.peer) +
                        " but got tag " + std::to_string(it->tag) +
                        ": the ranks are running different collectives");
      }
      if (it->bytes.size() > req.capacity) {
        return mismatch("rank " + std::to_string(req.peer) + " sent " +
                        std::to_string(it->bytes.size()) + " bytes where rank " +
                        std::to_string(rank_) + " expected at most " +
                        std::to_string(req.capacity) + ": the ranks disagree on the collective");
      }
      std::vector<uint8_t> bytes = std::move(it->bytes);
      box.queue.erase(it);
      lock.unlock();
      if (!bytes.empty()) std::memcpy(req.buffer, bytes.data(), bytes.size());
      req.bytes = bytes.size();
      req.done = true;
      return Status::ok();
    }
    if (group_->has_failed()) return group_->failure();
    if (group_->departed(req.peer)) {
      return transport_error("rank " + std::to_string(req.peer) +
                             " destroyed its communicator while rank " + std::to_string(rank_) +
                             " still waits for a message from it");
    }
    if (box.arrived.wait_until(lock, deadline) == std::cv_status::timeout &&
        Clock::now() >= deadline) {
      // One more look: the message may have arrived with the timeout.
      bool arrived = false;
      for (const auto& m : box.queue) arrived = arrived || m.source == req.peer;
      if (!arrived) {
        return timeout_error("rank " + std::to_string(rank_) +
                             " timed out waiting for a message from rank " +
                             std::to_string(req.peer));
      }
    }
  }
}

Status LocalTransport::wait_all(Request* reqs, size_t count, Deadline deadline) {
  for (size_t i = 0; i < count; ++i) {
    Request& req = reqs[i];
    if (req.done || req.kind != Request::Kind::kRecv) continue;
    QC_RETURN_IF_ERROR(wait_recv(req, deadline));
  }
  return Status::ok();
}

void LocalTransport::abort(const Status& reason) { group_->fail(reason); }

}  // namespace qc
