#include "fault_transport.h"

#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "comm_internals.h"
#include "core/communicator.h"

namespace qcfault {

using qc::Clock;
using qc::Request;
using qc::Status;

FaultTransport::FaultTransport(std::unique_ptr<qc::Transport> inner, FaultPlan plan)
    : inner_(std::move(inner)), plan_(std::move(plan)) {}

FaultTransport::~FaultTransport() = default;

bool FaultTransport::matches(long index, int peer, uint64_t tag) const {
  if (plan_.kind == FaultKind::kNone || plan_.rank != inner_->rank()) return false;
  if (plan_.message_index >= 0 && plan_.message_index != index) return false;
  if (plan_.peer >= 0 && plan_.peer != peer) return false;
  if (plan_.match_tag && plan_.tag != tag) return false;
  return true;
}

Status FaultTransport::killed_status() const {
  return qc::transport_error("rank " + std::to_string(inner_->rank()) +
                             " was killed by fault injection at its message " +
                             std::to_string(kill_index_) +
                             " (it neither sends nor receives any more)");
}

void FaultTransport::swallow(int peer, uint64_t tag, size_t bytes, Request* req) const {
  *req = Request();
  req->kind = Request::Kind::kSend;
  req->peer = peer;
  req->tag = tag;
  req->bytes = bytes;
  req->done = true;  // complete for the sender, never delivered
}

const uint8_t* FaultTransport::keep_copy(const void* data, size_t bytes, bool corrupt) {
  owned_bytes_.emplace_back(static_cast<const uint8_t*>(data),
                            static_cast<const uint8_t*>(data) + bytes);
  std::vector<uint8_t>& copy = owned_bytes_.back();
  if (corrupt) {
    // The codec's wire header: the first "QCWF" after the envelope.
    size_t header = qc::kEnvelopeBytes;
    for (size_t i = qc::kEnvelopeBytes; i + 4 <= copy.size(); ++i) {
      if (std::memcmp(copy.data() + i, "QCWF", 4) == 0) {
        header = i;
        break;
      }
    }
    for (const ByteFlip& f : plan_.flips) {
      size_t at = 0;
      switch (f.anchor) {
        case Anchor::kMessageStart: at = f.offset; break;
        case Anchor::kWireHeader: at = header + f.offset; break;
        case Anchor::kMessageEnd: at = f.offset < copy.size() ? copy.size() - 1 - f.offset
                                                              : copy.size(); break;
      }
      if (at < copy.size()) copy[at] ^= f.mask;
    }
  }
  return copy.data();
}

Status FaultTransport::post_send(int peer, uint64_t tag, const void* data, size_t bytes,
                                 size_t frame, Request* req) {
  const long index = next_index_++;
  const bool hit = !killed_ && matches(index, peer, tag);
  log_.push_back({index, peer, tag, bytes, hit});
  if (killed_) {
    swallow(peer, tag, bytes, req);
    return Status::ok();
  }
  if (!hit) return inner_->post_send(peer, tag, data, bytes, frame, req);
  fired_.fetch_add(1);
  switch (plan_.kind) {
    case FaultKind::kNone:
      break;
    case FaultKind::kDrop:
      swallow(peer, tag, bytes, req);
      return Status::ok();
    case FaultKind::kDelay: {
      const auto until = Clock::now() + std::chrono::milliseconds(plan_.delay_ms);
      while (Clock::now() < until) {
        Status failed = inner_->failure();
        if (!failed) {
          swallow(peer, tag, bytes, req);  // the group gave up meanwhile
          return failed;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      break;
    }
    case FaultKind::kDuplicate: {
      Status s = inner_->post_send(peer, tag, data, bytes, frame, req);
      if (!s) return s;
      const uint8_t* copy = keep_copy(data, bytes, false);
      owned_requests_.emplace_back();
      // Nobody waits for the copy: a network that duplicates a packet does
      // not make the sender wait for the second arrival either.
      return inner_->post_send(peer, tag, copy, bytes, frame, &owned_requests_.back());
    }
    case FaultKind::kTruncate: {
      size_t keep = plan_.keep_bytes >= 0 ? static_cast<size_t>(plan_.keep_bytes)
                                          : (bytes > plan_.cut_bytes ? bytes - plan_.cut_bytes : 0);
      if (keep > bytes) keep = bytes;
      return inner_->post_send(peer, tag, data, keep, frame, req);
    }
    case FaultKind::kCorrupt:
      return inner_->post_send(peer, tag, keep_copy(data, bytes, true), bytes, frame, req);
    case FaultKind::kKill:
      killed_ = true;
      kill_index_ = index;
      swallow(peer, tag, bytes, req);
      return Status::ok();
  }
  return inner_->post_send(peer, tag, data, bytes, frame, req);
}

Status FaultTransport::post_recv(int peer, uint64_t tag, void* buffer, size_t capacity,
                                 Request* req) {
  return inner_->post_recv(peer, tag, buffer, capacity, req);
}

Status FaultTransport::wait_all(Request* reqs, size_t count, qc::Deadline deadline) {
  if (!killed_) return inner_->wait_all(reqs, count, deadline);
  // A dead rank takes nothing out of its mailbox and its unsent messages die
  // with it: hide the receives from the real transport and let a wait with
  // a deadline already passed withdraw every send no peer has taken yet.
  std::vector<size_t> hidden;
  for (size_t i = 0; i < count; ++i) {
    if (reqs[i].kind == Request::Kind::kRecv && !reqs[i].done) {
      reqs[i].done = true;
      hidden.push_back(i);
    }
  }
  (void)inner_->wait_all(reqs, count, Clock::now() - std::chrono::seconds(1));
  for (size_t i : hidden) reqs[i].done = false;
  return killed_status();
}

Status FaultTransport::allreduce_float(const float* send, float* recv, size_t count,
                                       qc::Deadline deadline) {
  if (killed_) return killed_status();
  return inner_->allreduce_float(send, recv, count, deadline);
}

Status FaultTransport::agree(uint64_t value, qc::Deadline deadline) {
  if (killed_) return killed_status();
  return inner_->agree(value, deadline);
}

void FaultTransport::abort(const Status& reason) {
  if (killed_) return;  // a dead process tells nobody
  inner_->abort(reason);
}

void FaultTransport::interrupt(const Status& reason) {
  if (killed_) return;
  inner_->interrupt(reason);
}

Status FaultTransport::failure() const {
  if (killed_) return killed_status();
  return inner_->failure();
}

FaultTransport* install(qc_comm_t comm, const FaultPlan& plan) {
  qc::Communicator& object = *qct::internals_of(comm);
  auto wrapper = std::make_unique<FaultTransport>(std::move(object.transport), plan);
  FaultTransport* raw = wrapper.get();
  object.transport = std::move(wrapper);
  return raw;
}

}  // namespace qcfault
