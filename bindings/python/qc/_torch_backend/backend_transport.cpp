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

}  // namespace

BackendTransport::BackendTransport(c10::intrusive_ptr<c10d::Backend> backend, int rank, int size)
    : backend_(std::move(backend)), rank_(rank), size_(size) {
  completer_ = std::thread([this] { complete_in_order(); });
}

BackendTransport::~BackendTransport() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    if (waiting_on_ != nullptr) {
      try {
        waiting_on_->work->abort();
      } catch (...) {
        // Nothing more to do: the completer's wait returns or throws.
      }
    }
  }
  changed_.notify_all();
  if (completer_.joinable()) completer_.join();
  for (Transfer* t : live_) delete t;
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

int BackendTransport::post(bool is_send, int peer, void* data, size_t bytes, void** handle) {
  // Exceptions stop here: never across qc's C interface.
  try {
    auto t = std::make_unique<Transfer>();
    t->bytes = at::from_blob(data, {static_cast<int64_t>(bytes)},
                             at::TensorOptions().dtype(at::kByte).device(at::kCPU));
    std::vector<at::Tensor> tensors{t->bytes};
    t->work = is_send ? backend_->send(tensors, peer, /*tag=*/0)
                      : backend_->recv(tensors, peer, /*tag=*/0);
    Transfer* raw = t.release();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      live_.insert(raw);
      posted_.push_back(raw);
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

void BackendTransport::abort(void* context, int status, const char* reason) {
  auto* self = static_cast<BackendTransport*>(context);
  log_line(LogLevel::kInfo, self->rank_,
           std::string("qc's group failed (") + qc_status_string(static_cast<qc_status_t>(status)) +
               "): " + (reason != nullptr ? reason : ""));
}

const char* BackendTransport::error_message(void* /*context*/) { return tls_error.c_str(); }

void BackendTransport::complete_in_order() {
  for (;;) {
    Transfer* t = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !posted_.empty(); });
      if (stopping_) return;
      t = posted_.front();
      posted_.pop_front();
      waiting_on_ = t;
    }
    std::string error;
    try {
      if (!t->work->wait()) error = "gloo transfer aborted";
    } catch (const std::exception& e) {
      error = e.what();
      if (error.empty()) error = "gloo transfer failed";
    } catch (...) {
      error = "gloo transfer failed with an unknown exception";
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_on_ = nullptr;
      t->done = true;
      t->error = error;
      if (stopping_) return;
    }
    changed_.notify_all();
  }
}

}  // namespace qc_torch
