// backend_transport.cpp - see backend_transport.h.
#include "backend_transport.h"

#include <chrono>
#include <exception>
#include <vector>

#include "log.h"

namespace qc_torch {
namespace {

// error_message's text for the calling thread (qc copies it at once).
thread_local std::string tls_error;

int fail(const std::string& what, int code) {
  tls_error = what;
  return code;
}

at::Tensor view_bytes(void* data, size_t bytes) {
  return at::from_blob(data, {static_cast<int64_t>(bytes)},
                       at::TensorOptions().dtype(at::kByte).device(at::kCPU));
}

}  // namespace

BackendTransport::BackendTransport(c10::intrusive_ptr<c10d::Backend> backend, int rank, int size)
    : backend_(std::move(backend)), rank_(rank), size_(size) {
  lanes_.resize(static_cast<size_t>(size) + 1);
}

BackendTransport::~BackendTransport() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    for (auto& lane : lanes_) {
      if (!lane || lane->waiting_on == nullptr) continue;
      Transfer* t = lane->waiting_on;
      try {
        if (t->payload_work) t->payload_work->abort();
        if (t->length_work) t->length_work->abort();
      } catch (...) {
        // Nothing more to do: the completer's wait returns or throws.
      }
    }
  }
  changed_.notify_all();
  for (auto& lane : lanes_) {
    if (lane && lane->thread.joinable()) lane->thread.join();
  }
  for (Transfer* t : live_) delete t;
}

void BackendTransport::queue_locked(Transfer* t) {
  auto& lane = lanes_[t->is_send ? static_cast<size_t>(size_) : static_cast<size_t>(t->peer)];
  if (!lane) {
    lane = std::make_unique<Lane>();
    Lane* raw = lane.get();
    lane->thread = std::thread([this, raw] { complete_in_order(raw); });
  }
  lane->posted.push_back(t);
}

qc_transport_callbacks_t BackendTransport::callbacks() {
  qc_transport_callbacks_t cb;
  qc_transport_callbacks_init(&cb);
  cb.context = this;
  cb.rank = rank_;
  cb.size = size_;
  cb.any_thread = 1;
  cb.post_send = &BackendTransport::post_send;
  cb.post_recv = &BackendTransport::post_recv;
  cb.test = &BackendTransport::test;
  cb.wait = &BackendTransport::wait;
  cb.abort = &BackendTransport::abort;
  cb.error_message = &BackendTransport::error_message;
  return cb;
}

c10::intrusive_ptr<c10d::Work> BackendTransport::gloo_send(const at::Tensor& t, int peer,
                                                           int tag) {
  std::vector<at::Tensor> tensors{t};
  std::lock_guard<std::mutex> lock(post_mutex_);
  return backend_->send(tensors, peer, tag);
}

c10::intrusive_ptr<c10d::Work> BackendTransport::gloo_recv(const at::Tensor& t, int peer,
                                                           int tag) {
  std::vector<at::Tensor> tensors{t};
  std::lock_guard<std::mutex> lock(post_mutex_);
  return backend_->recv(tensors, peer, tag);
}

int BackendTransport::post(bool is_send, int peer, void* data, size_t bytes, void** handle) {
  // Exceptions stop here: never across qc's C interface.
  try {
    auto t = std::make_unique<Transfer>();
    t->is_send = is_send;
    t->peer = peer;
    t->expected = bytes;
    t->length = is_send ? static_cast<uint64_t>(bytes) : 0;
    t->length_bytes = view_bytes(&t->length, sizeof t->length);
    t->bytes = view_bytes(data, bytes);
    if (is_send) {
      t->length_work = gloo_send(t->length_bytes, peer, kLengthTag);
      if (bytes > 0) t->payload_work = gloo_send(t->bytes, peer, payload_tag(bytes));
    } else {
      t->length_work = gloo_recv(t->length_bytes, peer, kLengthTag);
      if (bytes > 0) t->payload_work = gloo_recv(t->bytes, peer, payload_tag(bytes));
    }
    Transfer* raw = t.release();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.insert(raw);
      queue_locked(raw);
    }
    changed_.notify_all();
    *handle = raw;
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string(is_send ? "gloo send to rank " : "gloo recv from rank ") +
                    std::to_string(peer) + " failed: " + e.what(),
                1);
  } catch (...) {
    return fail("gloo send/recv failed with an unknown exception", 1);
  }
}

int BackendTransport::post_send(void* context, int peer, const void* data, size_t bytes,
                                void** handle) {
  return static_cast<BackendTransport*>(context)->post(true, peer, const_cast<void*>(data), bytes,
                                                       handle);
}

int BackendTransport::post_recv(void* context, int peer, void* data, size_t bytes,
                                void** handle) {
  return static_cast<BackendTransport*>(context)->post(false, peer, data, bytes, handle);
}

int BackendTransport::finish_locked(Transfer* t, int* done) {
  if (!t->error.empty()) {
    // Failed: qc breaks the group and never passes this handle again;
    // it is freed with the transport.
    return fail(t->error, 2);
  }
  *done = 1;
  live_.erase(t);
  delete t;
  return 0;
}

int BackendTransport::test(void* context, void* handle, int* done) {
  auto* self = static_cast<BackendTransport*>(context);
  auto* t = static_cast<Transfer*>(handle);
  *done = 0;
  std::lock_guard<std::mutex> lock(self->mutex_);
  if (!t->done) return 0;
  return self->finish_locked(t, done);
}

int BackendTransport::wait(void* context, void* handle, double timeout_seconds, int* done) {
  auto* self = static_cast<BackendTransport*>(context);
  auto* t = static_cast<Transfer*>(handle);
  *done = 0;
  std::unique_lock<std::mutex> lock(self->mutex_);
  self->changed_.wait_for(lock, std::chrono::duration<double>(timeout_seconds),
                          [t] { return t->done; });
  if (!t->done) return 0;
  return self->finish_locked(t, done);
}

void BackendTransport::close_connections() {
  // gloo closes every connection of the group when a wait expires; a wait
  // on a receive nobody sends is the one way to do that through c10d.
  if (size_ < 2) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (closed_connections_) return;
    closed_connections_ = true;
  }
  try {
    auto work = gloo_recv(view_bytes(&abort_byte_, 1), (rank_ + 1) % size_, kAbortTag);
    work->wait(std::chrono::milliseconds(1));
  } catch (...) {
    // Expected: "Timed out waiting ... for recv operation".
  }
}

void BackendTransport::abort(void* context, int status, const char* reason) {
  auto* self = static_cast<BackendTransport*>(context);
  log_line(LogLevel::kInfo, self->rank_,
           std::string("qc's group failed (") + qc_status_string(static_cast<qc_status_t>(status)) +
               "): " + (reason != nullptr ? reason : "") +
               "; closing this rank's gloo connections of qc's group");
  self->close_connections();
}

const char* BackendTransport::error_message(void* /*context*/) { return tls_error.c_str(); }

bool BackendTransport::advance(Transfer* t) {
  if (t->is_send) {
    if (!t->length_work->wait()) throw std::runtime_error("gloo send aborted");
    if (t->payload_work && !t->payload_work->wait()) throw std::runtime_error("gloo send aborted");
    return true;
  }
  if (!t->length_seen) {
    if (!t->length_work->wait()) throw std::runtime_error("gloo recv aborted");
    t->length_seen = true;
    if (t->length == t->expected) return t->expected == 0;  // then its payload
    // The payload went to the slot of its own size, not to qc's buffer:
    // take it into scratch memory (the peer's send completes), then fail.
    // qc's receive stays posted, abandoned; qc keeps its memory until
    // qc_comm_destroy.
    t->error = "rank " + std::to_string(t->peer) + " sent a message of " +
               std::to_string(t->length) + " bytes where rank " + std::to_string(rank_) +
               " expects " + std::to_string(t->expected) +
               ": the ranks disagree on the collective (count, dtype, op or policy)";
    t->payload_work.reset();
    if (t->length == 0) return true;
    t->scratch = at::empty({static_cast<int64_t>(t->length)}, at::kByte);
    t->payload_work = gloo_recv(t->scratch, t->peer, payload_tag(t->length));
    return false;
  }
  if (!t->payload_work->wait()) throw std::runtime_error("gloo recv aborted");
  return true;
}

void BackendTransport::complete_in_order(Lane* lane) {
  for (;;) {
    Transfer* t = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this, lane] { return stopping_ || !lane->posted.empty(); });
      if (stopping_) return;
      t = lane->posted.front();
      lane->posted.pop_front();
      lane->waiting_on = t;
    }
    bool finished = true;
    std::string error;
    try {
      finished = advance(t);
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "gloo transfer failed";
    } catch (...) {
      error = "gloo transfer failed with an unknown exception";
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      lane->waiting_on = nullptr;
      if (stopping_) return;
      if (!error.empty() && t->error.empty()) t->error = error;
      if (finished || !error.empty()) {
        t->done = true;
      } else {
        // Its payload next: the receives from one peer complete in order.
        lane->posted.push_front(t);
      }
    }
    changed_.notify_all();
  }
}

}  // namespace qc_torch
