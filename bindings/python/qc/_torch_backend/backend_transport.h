// backend_transport.h - qc's callback transport (qc_transport_callbacks_t)
// over a c10d backend's point-to-point send/recv: ProcessGroupGloo, in a
// group of its own that carries nothing but qc's bytes.
//
// Sizes. gloo kills the process (an exception in its I/O thread) when a
// message is larger than the receive posted for it, which is what ranks
// that disagree on a collective's count would send. So a payload travels
// under a tag made of its size (payload_tag): a receive only ever meets a
// message of its own size. Each payload is preceded by its 8-byte length
// (tag kLengthTag, one slot for all); a length that is not what the
// receive expects fails the transfer at once with a message naming both
// sizes (qc then fails the collective, QC_ERROR_TRANSPORT), after taking
// the payload into scratch memory. Both are posted together: no extra
// round trip when the ranks agree.
//
// Completion. gloo's send/recv Work completes only inside Work::wait, and a
// wait with a timeout that expires closes all of gloo's connections of the
// group, so test and wait cannot poll gloo. Completer threads wait (without
// a timeout: gloo's own applies) on the posted transfers and mark each
// done; the callbacks only look at that mark. One thread per peer waits on
// the receives from it, in order (the length, then the payload); one
// thread waits on all sends, in order. Every receive is posted by qc, so
// each completes once the peer posted its message, which qc does for a
// whole step before it waits: no wait depends on another thread's wait.
// When qc's group fails (the abort callback) this rank closes its
// gloo connections on purpose (an expired wait), so peers blocked on it
// fail at once instead of at their timeout.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <memory>
#include <unordered_set>
#include <vector>

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
  static constexpr int kLengthTag = 1;
  static constexpr int kAbortTag = 2;  // never sent: a wait on it closes the group
  // Payloads: 3 and up, by size (two sizes share a tag only 2^31 - 8 bytes apart).
  static int payload_tag(size_t bytes) {
    return 3 + static_cast<int>(bytes % static_cast<size_t>(0x7ffffff8));
  }

  struct Transfer {
    bool is_send = false;
    int peer = -1;
    size_t expected = 0;     // recv: the size qc named
    uint64_t length = 0;     // send: ours; recv: what the sender announced
    at::Tensor length_bytes; // `length` viewed as 8 uint8 (no copy)
    at::Tensor bytes;        // qc's memory viewed as uint8 (no copy)
    at::Tensor scratch;      // recv of a message of the wrong size
    c10::intrusive_ptr<c10d::Work> length_work;
    c10::intrusive_ptr<c10d::Work> payload_work;
    bool length_seen = false;  // recv: the length arrived
    bool done = false;
    std::string error;       // set with done on failure
  };

  static int post_send(void* context, int peer, const void* data, size_t bytes, void** handle);
  static int post_recv(void* context, int peer, void* data, size_t bytes, void** handle);
  static int test(void* context, void* handle, int* done);
  static int wait(void* context, void* handle, double timeout_seconds, int* done);
  static void abort(void* context, int status, const char* reason);
  static const char* error_message(void* context);

  int post(bool is_send, int peer, void* data, size_t bytes, void** handle);
  c10::intrusive_ptr<c10d::Work> gloo_send(const at::Tensor& t, int peer, int tag);
  c10::intrusive_ptr<c10d::Work> gloo_recv(const at::Tensor& t, int peer, int tag);
  int finish_locked(Transfer* t, int* done);  // under mutex_, t->done
  // Completer thread: one step of t (wait for its length or its payload);
  // returns whether t is finished. Throws what gloo throws.
  bool advance(Transfer* t);
  // A queue of transfers and the thread that completes them in order.
  struct Lane {
    std::deque<Transfer*> posted;
    Transfer* waiting_on = nullptr;
    std::thread thread;
  };
  void queue_locked(Transfer* t);  // under mutex_: onto its lane (started lazily)
  void complete_in_order(Lane* lane);
  void close_connections();

  c10::intrusive_ptr<c10d::Backend> backend_;
  int rank_;
  int size_;
  std::mutex post_mutex_;            // one gloo post at a time
  std::mutex mutex_;
  std::condition_variable changed_;  // a transfer was posted or completed
  std::vector<std::unique_ptr<Lane>> lanes_;  // [peer]: its receives; [size]: all sends
  std::unordered_set<Transfer*> live_;  // posted, not yet reported done
  bool stopping_ = false;
  bool closed_connections_ = false;
  uint8_t abort_byte_ = 0;
};

}  // namespace qc_torch
