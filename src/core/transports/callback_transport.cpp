#include "core/transports/callback_transport.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/byte_order.h"
#include "core/transports/backoff.h"

namespace qc {

// A transfer handed to the library: its handle and staging block. Going
// away unfinished (a failed call drops its requests), it hands both back to
// the transport (abandon), which cancels the transfer or keeps the block.
struct CallbackRequestState {
  CallbackTransport* transport = nullptr;
  void* handle = nullptr;
  bool receive = false;
  bool finished = false;  // the library said done: it no longer uses `block`
  CallbackTransport::Block block;
  void* destination = nullptr;  // receive: the caller's buffer
  size_t capacity = 0;          // receive: the caller's capacity

  ~CallbackRequestState() {
    if (transport == nullptr) return;
    if (finished) {
      transport->give_back_block(std::move(block));
    } else {
      transport->abandon(handle, std::move(block));
    }
  }
};

namespace {

CallbackRequestState* state_of(const Request& req) {
  return static_cast<CallbackRequestState*>(req.transport_state.get());
}

}  // namespace

CallbackTransport::CallbackTransport(const qc_transport_callbacks_t& callbacks)
    : callbacks_(callbacks) {}

CallbackTransport::~CallbackTransport() {
  // The library lets go of every transfer in destroy; only then may the
  // blocks of uncancelled ones go.
  if (callbacks_.destroy != nullptr) callbacks_.destroy(callbacks_.context);
  leftovers_.clear();
}

Status CallbackTransport::failure() const {
  if (!failed_.load(std::memory_order_acquire)) return Status::ok();
  std::lock_guard<std::mutex> lock(failure_mutex_);
  return failure_;
}

void CallbackTransport::set_failure(const Status& s) {
  std::lock_guard<std::mutex> lock(failure_mutex_);
  if (failed_.load(std::memory_order_relaxed)) return;  // the first failure is the cause
  failure_ = s;
  failed_.store(true, std::memory_order_release);
}

void CallbackTransport::abort(const Status& reason) {
  set_failure(reason);
  if (aborted_) return;
  aborted_ = true;
  if (callbacks_.abort == nullptr) return;
  const Status cause = failure();
  callbacks_.abort(callbacks_.context, static_cast<int>(cause.code()), cause.message().c_str());
}

Status CallbackTransport::fail(const Status& bad) {
  abort(bad);
  return failure();
}

Status CallbackTransport::callback_error(const char* what, int rc, int peer) const {
  std::string text = std::string("the transport callback ") + what + " failed on rank " +
                     std::to_string(callbacks_.rank);
  if (peer >= 0) text += " (peer " + std::to_string(peer) + ")";
  text += ": it returned " + std::to_string(rc);
  if (callbacks_.error_message != nullptr) {
    const char* message = callbacks_.error_message(callbacks_.context);
    if (message != nullptr && message[0] != '\0') text += ": " + std::string(message);
  }
  return transport_error(text);
}

CallbackTransport::Block CallbackTransport::take_block(size_t bytes) {
  // The smallest free block that fits, else a new one in place of the
  // largest free one, so the free list holds the sizes of one call.
  size_t best = free_blocks_.size();
  for (size_t i = 0; i < free_blocks_.size(); ++i) {
    if (free_blocks_[i].capacity >= bytes &&
        (best == free_blocks_.size() || free_blocks_[i].capacity < free_blocks_[best].capacity)) {
      best = i;
    }
  }
  if (best < free_blocks_.size()) {
    Block b = std::move(free_blocks_[best]);
    free_blocks_.erase(free_blocks_.begin() + static_cast<std::ptrdiff_t>(best));
    return b;
  }
  if (!free_blocks_.empty()) {
    auto largest = std::max_element(free_blocks_.begin(), free_blocks_.end(),
                                    [](const Block& a, const Block& b) {
                                      return a.capacity < b.capacity;
                                    });
    free_blocks_.erase(largest);
  }
  Block b;
  b.bytes.reset(new uint8_t[bytes]);  // uninitialised: every byte sent is written first
  b.capacity = bytes;
  return b;
}

void CallbackTransport::give_back_block(Block block) {
  if (block.bytes != nullptr) free_blocks_.push_back(std::move(block));
}

void CallbackTransport::abandon(void* handle, Block block) {
  if (callbacks_.cancel != nullptr) {
    callbacks_.cancel(callbacks_.context, handle);
    return;  // the library has let go: the block is freed here
  }
  leftovers_.push_back(std::move(block));
}

Status CallbackTransport::post_send(int peer, uint64_t tag, const void* data, size_t bytes,
                                   size_t frame, Request* req) {
  QC_RETURN_IF_ERROR(failure());
  if (peer < 0 || peer >= size() || peer == rank() || bytes > frame) {
    return internal_error("the callback transport got send peer " + std::to_string(peer) +
                          " with " + std::to_string(bytes) + " bytes in a frame of " +
                          std::to_string(frame) + " on rank " + std::to_string(rank()) +
                          " of " + std::to_string(size()));
  }
  auto state = std::make_shared<CallbackRequestState>();
  const size_t total = kHeaderBytes + frame;
  state->block = take_block(total);
  uint8_t* out = state->block.bytes.get();
  store_le64(out, tag);
  store_le64(out + 8, bytes);
  if (bytes > 0) std::memcpy(out + kHeaderBytes, data, bytes);
  // The padding is sent too (the receive names the frame): zeros, so no
  // stale memory of this process leaves it.
  if (frame > bytes) std::memset(out + kHeaderBytes + bytes, 0, frame - bytes);
  *req = Request();
  req->kind = Request::Kind::kSend;
  req->peer = peer;
  req->tag = tag;
  req->bytes = bytes;
  req->frame = frame;
  const int rc = callbacks_.post_send(callbacks_.context, peer, out, total, &state->handle);
  if (rc != 0) {
    give_back_block(std::move(state->block));
    return fail(callback_error("post_send", rc, peer));
  }
  state->transport = this;  // from here on the library holds the block
  req->transport_state = state;
  return Status::ok();
}

Status CallbackTransport::post_recv(int peer, uint64_t tag, void* buffer, size_t capacity,
                                   Request* req) {
  QC_RETURN_IF_ERROR(failure());
  if (peer < 0 || peer >= size() || peer == rank()) {
    return internal_error("the callback transport got receive peer " + std::to_string(peer) +
                          " on rank " + std::to_string(rank()) + " of " + std::to_string(size()));
  }
  auto state = std::make_shared<CallbackRequestState>();
  state->receive = true;
  state->destination = buffer;
  state->capacity = capacity;
  const size_t total = kHeaderBytes + capacity;
  state->block = take_block(total);
  *req = Request();
  req->kind = Request::Kind::kRecv;
  req->peer = peer;
  req->tag = tag;
  req->buffer = buffer;
  req->capacity = capacity;
  const int rc = callbacks_.post_recv(callbacks_.context, peer, state->block.bytes.get(), total,
                                      &state->handle);
  if (rc != 0) {
    give_back_block(std::move(state->block));
    return fail(callback_error("post_recv", rc, peer));
  }
  state->transport = this;
  req->transport_state = state;
  return Status::ok();
}

Status CallbackTransport::finish(Request& req, CallbackRequestState& state) {
  state.finished = true;
  req.done = true;
  if (!state.receive) return Status::ok();
  const uint8_t* in = state.block.bytes.get();
  const uint64_t tag = load_le64(in);
  const uint64_t bytes = load_le64(in + 8);
  if (tag != req.tag) {
    return mismatch("the next message from rank " + std::to_string(req.peer) +
                    " belongs to another step or call than rank " + std::to_string(rank()) +
                    " expects");
  }
  if (bytes > state.capacity) {
    return mismatch("rank " + std::to_string(req.peer) + " sent a message of " +
                    std::to_string(bytes) + " bytes where rank " + std::to_string(rank()) +
                    " expects at most " + std::to_string(state.capacity) +
                    ": the ranks disagree on the count, dtype, op, layer or policy of this call");
  }
  if (bytes > 0) std::memcpy(state.destination, in + kHeaderBytes, static_cast<size_t>(bytes));
  req.bytes = static_cast<size_t>(bytes);
  return Status::ok();
}

Status CallbackTransport::progress(Request& req) {
  CallbackRequestState* s = state_of(req);
  if (req.done || s == nullptr) return Status::ok();
  int done = 0;
  const int rc = callbacks_.test(callbacks_.context, s->handle, &done);
  if (rc != 0) return callback_error("test", rc, req.peer);
  return done != 0 ? finish(req, *s) : Status::ok();
}

Status CallbackTransport::wait_all(Request* reqs, size_t count, Deadline deadline) {
  Backoff backoff;
  for (;;) {
    // A failure recorded by interrupt() (qc_comm_destroy on another
    // thread) ends the wait here, and fail() tells the peers.
    if (failed_.load(std::memory_order_acquire)) return fail(failure());
    Request* pending = nullptr;
    for (size_t i = 0; i < count; ++i) {
      Status s = progress(reqs[i]);
      if (!s) return fail(s);
      if (!reqs[i].done && state_of(reqs[i]) != nullptr && pending == nullptr) pending = &reqs[i];
    }
    if (pending == nullptr) return Status::ok();
    const auto now = Clock::now();
    if (now >= deadline) {
      std::string peers;
      for (size_t i = 0; i < count; ++i) {
        if (!reqs[i].done) peers += (peers.empty() ? "" : ", ") + std::to_string(reqs[i].peer);
      }
      return fail(timeout_error("rank " + std::to_string(rank()) +
                                " timed out waiting for rank(s) " + peers +
                                " (a peer is gone, stuck or much slower)"));
    }
    if (callbacks_.wait == nullptr) {
      backoff.pause();
      continue;
    }
    const double left = std::chrono::duration<double>(deadline - now).count();
    int done = 0;
    CallbackRequestState* s = state_of(*pending);
    const int rc = callbacks_.wait(callbacks_.context, s->handle,
                                   std::max(1e-6, std::min(kLongestWaitSlice, left)), &done);
    if (rc != 0) return fail(callback_error("wait", rc, pending->peer));
    if (done != 0) {
      Status st = finish(*pending, *s);
      if (!st) return fail(st);
    }
  }
}

}  // namespace qc
