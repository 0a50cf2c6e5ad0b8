// The transport interface: moving bytes between ranks, nothing else.
// Algorithms never see a transport directly; CollectiveContext wraps it.
//
// Contract every transport keeps:
//  - Messages from one sender to one receiver arrive in the order posted.
//  - post_* never blocks for long; wait_all blocks until all requests are done
//    or the deadline passes (QC_ERROR_TIMEOUT), never forever.
//  - A send may complete only once its receiver has taken the bytes, so a
//    step posts all its sends and receives before it waits, and wait_all
//    makes progress on every request it is given, in any order.
//  - After abort() (or any failure), every wait on every rank of the group
//    fails promptly with the failure's status: a broken group stays broken.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"

namespace qc {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// The longest wait a deadline stands for: about 31.7 years, "for ever" in
// practice. Longer timeouts are cut to it, since seconds * 1e9 past about
// 9.2e9 s overflows the clock's 64-bit nanoseconds (which made every call
// time out at once), and the standard library may add a deadline to
// system_clock's now (~1.7e18 ns since 1970) when it waits on one.
constexpr double kLongestWaitSeconds = 1e9;

// The deadline `seconds` from now (a communicator's timeout). Huge values
// (1e12, 1e300, +Inf) give the deadline kLongestWaitSeconds away; zero,
// negative and NaN give now (the wait times out at its first check).
inline Deadline deadline_after(double seconds) {
  const Deadline now = Clock::now();
  if (!(seconds > 0.0)) return now;
  const double capped = seconds < kLongestWaitSeconds ? seconds : kLongestWaitSeconds;
  return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(capped));
}

struct Request {
  enum class Kind { kNone, kSend, kRecv };
  Kind kind = Kind::kNone;
  int peer = -1;
  uint64_t tag = 0;
  void* buffer = nullptr;  // receive destination
  size_t capacity = 0;     // receive capacity
  size_t bytes = 0;        // bytes sent, or received once done
  size_t frame = 0;        // send: the frame; receive: the sender's, where known (0: unknown)
  bool done = false;
  std::shared_ptr<void> transport_state;  // the transport's own bookkeeping
};

// One send or receive of an enqueued device group (enqueue_device_group):
// `bytes` at `data`, device memory of the transport's device.
struct DeviceTransfer {
  bool send = false;
  int peer = -1;
  void* data = nullptr;
  size_t bytes = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // `data` must stay valid until the request completes. `frame` (>= bytes)
  // is the capacity the receiver posts for this message; the sender knows it
  // from the call's shape. Transports whose receives must name the exact
  // size (NCCL) send `frame` bytes; the others send `bytes`, and the local
  // transport checks that `frame` equals the receive's capacity, so every
  // test run proves the algorithms agree on it.
  virtual Status post_send(int peer, uint64_t tag, const void* data, size_t bytes, size_t frame,
                           Request* req) = 0;
  // A message longer than `capacity`, or with another tag than the next one
  // from `peer`, fails the wait with QC_ERROR_MISMATCH.
  virtual Status post_recv(int peer, uint64_t tag, void* buffer, size_t capacity, Request* req) = 0;
  virtual Status wait_all(Request* reqs, size_t count, Deadline deadline) = 0;
  // Moves pending transfers along without waiting for any (a pipelined
  // schedule calls it between steps of compute). Transports whose bytes
  // move on their own (local: the receiver copies) need nothing here.
  virtual Status progress() { return Status::ok(); }

  // A native float32 sum (MPI_Allreduce with MPI_SUM), used for uncompressed
  // allreduces (codec none, or a message below the policy's
  // min_compress_bytes) when QC_ALGO_AUTO or QC_ALGO_NATIVE picks it.
  // `send` == `recv` sums in place. Before it, agree() must have shown that
  // every rank is in the same call: a native collective has no envelope.
  virtual bool has_native_float_allreduce() const { return false; }
  virtual Status allreduce_float(const float* /*send*/, float* /*recv*/, size_t /*count*/,
                                 Deadline /*deadline*/) {
    return unsupported(std::string("the ") + name() + " transport has no native float allreduce");
  }
  // A float32 sum (or average) of CUDA device buffers, enqueued on the
  // caller's `stream`; it returns once enqueued, and the result is in `recv`
  // when the stream gets there (stream-ordered, as NCCL's own calls are).
  // Only transports whose collectives run on the device (NCCL). Before it,
  // agree() must have shown that every rank is in the same call. Failures
  // found after it returned break the group (failure(), and so
  // qc_comm_get_async_error).
  virtual bool has_device_float_allreduce() const { return false; }
  // Whether enqueue_device_allreduce_float may take these buffers (the
  // communicator's device): QC_ERROR_INVALID_ARGUMENT naming the one that
  // may not. Checked before the agreement, so that a rank whose buffers are
  // wrong makes every rank fail it instead of leaving its peers' allreduces
  // waiting on their streams.
  virtual Status check_device_buffers(const float* /*send*/, const float* /*recv*/) const {
    return Status::ok();
  }
  virtual Status enqueue_device_allreduce_float(const float* /*send*/, float* /*recv*/,
                                                size_t /*count*/, bool /*average*/,
                                                void* /*stream*/) {
    return unsupported(std::string("the ") + name() + " transport has no device float allreduce");
  }
  // Point-to-point on device buffers, stream-ordered: the sends and receives
  // of `ops` as one group, enqueued on the caller's `stream` after the work
  // already there; it returns once enqueued, and the received bytes are in
  // place when the stream gets there. A receive names exactly its sender's
  // size. No envelope travels: before the first group of a call, agree()
  // must have shown that every rank is in the same call, which fixes every
  // message's size. Only transports whose messages move on the device
  // (NCCL); failures found after it returned break the group (failure()).
  virtual bool has_device_groups() const { return false; }
  virtual Status enqueue_device_group(const DeviceTransfer* /*ops*/, size_t /*count*/,
                                      void* /*stream*/) {
    return unsupported(std::string("the ") + name() + " transport has no device groups");
  }
  // Collective check that every rank passed the same `value` (the call's
  // signature): QC_ERROR_MISMATCH on every rank otherwise. Only transports
  // with a native float allreduce need it.
  virtual Status agree(uint64_t /*value*/, Deadline /*deadline*/) {
    return unsupported(std::string("the ") + name() + " transport has no native agreement");
  }

  // Whether this rank's calls may run on a thread qc starts (the progress
  // thread of non-blocking calls) while the program goes on with its own
  // calls to the transport's library: MPI only at MPI_THREAD_MULTIPLE.
  virtual bool supports_progress_thread() const { return true; }

  // Whether a posted transfer moves while the caller computes (a network
  // card, MPI's progress, a GPU), so that cutting a ring's blocks into
  // pieces overlaps its hops with the encodes. False where a transfer is a
  // copy made in the call that posts or awaits it (the local transport):
  // there a pipelined ring only multiplies its waits on its neighbours
  // (measured 10-20 % slower at 4 MiB, docs/benchmarks.md).
  virtual bool transfers_overlap_compute() const { return true; }

  // Mark the group failed with `reason` and wake every waiting rank.
  // A value every rank of this group agrees on and that differs between
  // groups which could see each other's stray messages (0: no such risk).
  // Folded into every call signature, so a stray message is a MISMATCH.
  virtual uint64_t instance_id() const { return 0; }
  virtual void abort(const Status& reason) = 0;
  // abort() from a thread other than the one running this rank's call
  // (qc_comm_destroy while a collective waits): the waiting call wakes and
  // fails with `reason`. A transport whose abort() may not run beside its
  // own calls (MPI below MPI_THREAD_MULTIPLE) only records the reason there
  // and leaves telling the peers to the waiting call.
  virtual void interrupt(const Status& reason) { abort(reason); }
  // QC_SUCCESS while the group is healthy, else the status that broke it.
  virtual Status failure() const = 0;
};

}  // namespace qc
