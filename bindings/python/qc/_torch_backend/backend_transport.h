// backend_transport.h - qc's callback transport (qc_transport_callbacks_t)
// over a c10d backend's point-to-point send/recv: ProcessGroupGloo, in a
// group of its own that carries nothing but qc's bytes.
//
// gloo's send/recv Work completes only inside Work::wait, and a wait with a
// timeout that expires closes gloo's connections, so test and wait cannot
// poll gloo. One completer thread waits (without a timeout: gloo's own
// applies) on the posted transfers in posting order and marks each done;
// the callbacks only look at that mark. Waiting in order cannot deadlock:
// a posted transfer completes on gloo's I/O threads once the peer posted
// its side, which qc does for a whole step before it waits.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include "qc.h"

namespace qc_torch {

class BackendTransport {
 public:
  BackendTransport(c10::intrusive_ptr<c10d::Backend> backend, int rank, int size);
  // Stops the completer (aborting the transfer it waits on) and frees what
  // qc left: call after qc_comm_destroy.
  ~BackendTransport();
  BackendTransport(const BackendTransport&) = delete;
  BackendTransport& operator=(const BackendTransport&) = delete;

  // The callback table, context = this, any_thread = 1; no destroy callback:
  // the owner destroys this object after qc_comm_destroy.
  qc_transport_callbacks_t callbacks();

 private:
  struct Transfer {
    c10::intrusive_ptr<c10d::Work> work;
    at::Tensor bytes;  // qc's memory, viewed as uint8 (no copy)
    bool done = false;
    std::string error;  // set with done when gloo's wait threw
  };

  static int post_send(void* context, int peer, const void* data, size_t bytes, void** handle);
  static int post_recv(void* context, int peer, void* data, size_t bytes, void** handle);
  static int test(void* context, void* handle, int* done);
  static int wait(void* context, void* handle, double timeout_seconds, int* done);
  static void abort(void* context, int status, const char* reason);
  static const char* error_message(void* context);

  int post(bool is_send, int peer, void* data, size_t bytes, void** handle);
  int finish_locked(Transfer* t, int* done);  // under mutex_, t->done
  void complete_in_order();

  c10::intrusive_ptr<c10d::Backend> backend_;
  int rank_;
  int size_;
  std::mutex mutex_;
  std::condition_variable changed_;  // a transfer was posted or completed
  std::deque<Transfer*> posted_;     // waiting for the completer, in order
  std::unordered_set<Transfer*> live_;  // posted, not yet reported done
  Transfer* waiting_on_ = nullptr;   // the completer's current transfer
  bool stopping_ = false;
  std::thread completer_;
};

}  // namespace qc_torch
