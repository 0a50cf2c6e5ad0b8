// The callback transport: a framework's own communication library carries
// qc's messages through the callbacks of qc_transport_callbacks_t (qc.h).
//
// The library sees opaque messages whose receives name their exact size, so
// one that must know a message's size before it arrives (gloo, NCCL) works:
// every message is a 16-byte header (qc's 64-bit tag, then the payload's
// length) and the payload padded to its frame, the capacity the receiver
// posts (Transport::post_send). The receiver checks the header: another tag
// is QC_ERROR_MISMATCH (a message of another step or call), a length past
// the capacity too; nothing a peer sends lands outside qc's staging block.
//
// Every byte the library reads or writes belongs to the transport: sends
// are copied into a staging block before post_send, receives land in one
// and are copied out once complete. A transfer still pending when its call
// fails is cancelled (the cancel callback) and its block freed; without a
// cancel callback the block is kept until the destroy callback has returned,
// so a late completion never writes into memory qc has freed or handed back.
//
// Waiting tests every pending transfer, then checks the failure flag (set by
// interrupt() from qc_comm_destroy on another thread) and the deadline, and
// then pauses: in the wait callback on the oldest pending transfer (at most
// 0.1 s at a time), or, without one, with growing sleeps (backoff.h).
// On a failure this rank calls the abort callback once, so the library can
// tell the peers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/transports/transport.h"
#include "qc.h"

namespace qc {

struct CallbackRequestState;

class CallbackTransport final : public Transport {
 public:
  // The header in front of every payload: tag, then the payload's bytes.
  static constexpr size_t kHeaderBytes = 16;
  // The longest single pause in the wait callback, so that a deadline and
  // an interrupt are seen promptly.
  static constexpr double kLongestWaitSlice = 0.1;

  // `callbacks` has been validated (qc_comm_create_callbacks).
  explicit CallbackTransport(const qc_transport_callbacks_t& callbacks);
  ~CallbackTransport() override;

  const char* name() const override { return "callbacks"; }
  int rank() const override { return callbacks_.rank; }
  int size() const override { return callbacks_.size; }

  Status post_send(int peer, uint64_t tag, const void* data, size_t bytes, size_t frame,
                   Request* req) override;
  Status post_recv(int peer, uint64_t tag, void* buffer, size_t capacity, Request* req) override;
  Status wait_all(Request* reqs, size_t count, Deadline deadline) override;
  bool supports_progress_thread() const override { return callbacks_.any_thread != 0; }
  void abort(const Status& reason) override;
  // Only recorded: the callbacks are never called beside the rank's own
  // call. That call's next poll sees it, fails with it and calls abort.
  void interrupt(const Status& reason) override { set_failure(reason); }
  Status failure() const override;

 private:
  friend struct CallbackRequestState;

  // A staging block: the header and the payload's frame.
  struct Block {
    std::unique_ptr<uint8_t[]> bytes;
    size_t capacity = 0;
  };

  void set_failure(const Status& s);
  // Fails the call with `bad`: records it, calls abort once, and returns
  // the group's failure (the first one recorded).
  Status fail(const Status& bad);
  // The status of a callback that returned `rc` != 0 (`what` names it).
  Status callback_error(const char* what, int rc, int peer) const;
  Block take_block(size_t bytes);
  void give_back_block(Block block);
  // Called by a request's state when it goes away before its transfer was
  // done: cancels the transfer, or keeps its block until destruction.
  void abandon(void* handle, Block block);
  // Tests one request; on completion checks a receive's header and copies
  // its payload out.
  Status progress(Request& req);
  Status finish(Request& req, CallbackRequestState& state);

  qc_transport_callbacks_t callbacks_;
  mutable std::mutex failure_mutex_;
  Status failure_;
  std::atomic<bool> failed_{false};
  bool aborted_ = false;  // the abort callback was called
  std::vector<Block> free_blocks_;
  std::vector<Block> leftovers_;  // blocks of abandoned, uncancelled transfers
};

}  // namespace qc
