// Fault injection for the unit tests (issue 10): a qc::Transport that wraps a
// rank's real transport and, following a FaultPlan, drops, delays,
// duplicates, truncates or corrupts one chosen message, or "kills" the rank.
//
// Test-only: it reaches into Communicator (src/core/communicator.h) to replace
// a communicator's transport, so the test links the internal objects.
//
// Which message: the plan names the sending rank and that rank's message
// index (its n-th post_send since the wrapper was installed, 0-based),
// optionally narrowed to one destination peer and/or one transport tag.
//
// What "kill" means on the local transport (ranks are threads, so nothing
// can really die): from the chosen message on, the victim rank behaves as a
// crashed process looks to its peers —
//  - the chosen send and every later one are swallowed (never delivered);
//  - sends it had posted but that no peer had taken yet are withdrawn (a
//    crashed process takes its unsent buffers with it);
//  - it takes no more messages out of its mailbox;
//  - it tells nobody: abort() is not forwarded to the group, and its
//    communicator is NOT destroyed (destroying it would tell the peers at
//    once through the local transport's "departed" flag, which a crash
//    does not do).
// The peers therefore see silence and must time out (QC_ERROR_TIMEOUT). The
// victim's own thread must return somewhere: its pending and later waits
// fail at once with QC_ERROR_TRANSPORT ("rank r was killed by fault
// injection ..."), and its communicator stays broken with that status.
//
// Delay: the chosen send is posted N ms late (the sender's thread sleeps in
// post_send, waking early if the group fails meanwhile). Messages from one
// sender to one receiver are FIFO, so later messages of that sender are late
// too; on the rendezvous local transport that is the same as a slow link.
//
// Drop: the send "completes" for the sender at once (as an eager send into a
// lossy network would) and is never delivered.
//
// Duplicate: the message is delivered twice; the copy is owned by the wrapper
// and the sender never waits for it (its receiver may never take it).
//
// Truncate: only the first `keep_bytes` bytes (or all but the last
// `cut_bytes`) are sent.
//
// Corrupt: the bytes are copied into a buffer owned by the wrapper (the
// caller's buffer may be sent to several peers and must stay intact), the
// chosen bytes are XORed, and the copy is sent.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "core/transports/transport.h"
#include "qc.h"

namespace qcfault {

enum class FaultKind { kNone, kDrop, kDelay, kDuplicate, kTruncate, kCorrupt, kKill };

// Where a corrupted byte sits.
enum class Anchor {
  kMessageStart,  // offset from the first byte (the 24-byte envelope: magic
                  // 0-3, step 4-7, call sequence 8-15, signature 16-23)
  kWireHeader,    // offset from the first "QCWF" after the envelope (the
                  // codec's 32-byte wire header); messages without one (the
                  // native algorithm's packed integers) use the payload start
  kMessageEnd,    // offset back from the last byte (0: the last byte)
};

struct ByteFlip {
  Anchor anchor = Anchor::kMessageStart;
  size_t offset = 0;
  uint8_t mask = 0xff;
};

struct FaultPlan {
  FaultKind kind = FaultKind::kNone;
  int rank = -1;             // the sending rank the fault applies to
  long message_index = -1;   // that rank's n-th post_send (-1: every one)
  int peer = -1;             // only sends to this peer (-1: any)
  bool match_tag = false;    // only sends with this transport tag
  uint64_t tag = 0;
  int delay_ms = 0;          // kDelay
  long keep_bytes = -1;      // kTruncate: bytes kept (-1: use cut_bytes)
  size_t cut_bytes = 1;      // kTruncate: bytes cut from the end
  std::vector<ByteFlip> flips;  // kCorrupt
  // Report transfers_overlap_compute() even over the local transport, whose
  // transfers do not (the planner then cuts the ring as over MPI).
  bool claim_overlap = false;
};

// One send as the wrapper saw it (for calibration and reports).
struct SendRecord {
  long index;
  int peer;
  uint64_t tag;
  size_t bytes;
  bool faulted;
};

class FaultTransport final : public qc::Transport {
 public:
  FaultTransport(std::unique_ptr<qc::Transport> inner, FaultPlan plan);
  ~FaultTransport() override;

  const char* name() const override { return inner_->name(); }
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  qc::Status post_send(int peer, uint64_t tag, const void* data, size_t bytes, size_t frame,
                       qc::Request* req) override;
  qc::Status post_recv(int peer, uint64_t tag, void* buffer, size_t capacity,
                       qc::Request* req) override;
  qc::Status wait_all(qc::Request* reqs, size_t count, qc::Deadline deadline) override;

  bool has_native_float_allreduce() const override {
    return inner_->has_native_float_allreduce();
  }
  qc::Status allreduce_float(const float* send, float* recv, size_t count,
                             qc::Deadline deadline) override;
  qc::Status agree(uint64_t value, qc::Deadline deadline) override;

  bool transfers_overlap_compute() const override {
    return plan_.claim_overlap || inner_->transfers_overlap_compute();
  }
  uint64_t instance_id() const override { return inner_->instance_id(); }
  void abort(const qc::Status& reason) override;
  void interrupt(const qc::Status& reason) override;
  qc::Status failure() const override;

  // Read by the test thread after the rank threads joined.
  int times_fired() const { return fired_.load(); }
  bool killed() const { return killed_.load(); }
  const std::vector<SendRecord>& sends() const { return log_; }
  long sends_posted() const { return next_index_; }

 private:
  bool matches(long index, int peer, uint64_t tag) const;
  qc::Status killed_status() const;
  void swallow(int peer, uint64_t tag, size_t bytes, qc::Request* req) const;
  const uint8_t* keep_copy(const void* data, size_t bytes, bool corrupt);

  std::unique_ptr<qc::Transport> inner_;
  FaultPlan plan_;
  long next_index_ = 0;
  long kill_index_ = -1;
  std::atomic<int> fired_{0};
  std::atomic<bool> killed_{false};
  std::vector<SendRecord> log_;
  // Bytes the wrapper sends on the caller's behalf (corrupted copies and
  // duplicates) and the requests of duplicates nobody waits for; both live
  // as long as the wrapper, i.e. the communicator.
  std::deque<std::vector<uint8_t>> owned_bytes_;
  std::deque<qc::Request> owned_requests_;
};

// Replaces comm's transport by a FaultTransport that owns the original and
// returns it (owned by comm from now on). comm must come from a local group
// and not be in a collective.
FaultTransport* install(qc_comm_t comm, const FaultPlan& plan);

}  // namespace qcfault
