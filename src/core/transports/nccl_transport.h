// The NCCL transport: qc's point-to-point messages moved by ncclSend/ncclRecv.
//
// NCCL differs from the other transports in two ways that shape this file:
//  - A receive must name exactly the sender's count (a larger one hangs or
//    corrupts). So every message travels as a frame of the size the receiver
//    posts, which the sender knows from the call's shape (Request::frame),
//    with a 16-byte header in front: the qc tag and the true length.
//  - NCCL calls are grouped and stream-ordered. One wait_all is one NCCL
//    group (every request of the wait, in the order given), polled until it
//    finishes or the deadline passes; then the group is aborted, as NCCL's
//    own watchdogs do, and the peers' waits time out in turn.
// Everything NCCL- or CUDA-specific sits behind NcclBackend: the real one
// (src/cuda/nccl_backend.cpp) over a communicator split from the caller's,
// and a fake in the unit tests that runs ranks as threads and checks that
// every send is matched by a receive of exactly its size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/transports/transport.h"

namespace qc {

// One ncclSend or ncclRecv of a group: `bytes` at `offset` in the wait's
// message image.
struct NcclOp {
  bool send = false;
  int peer = -1;
  size_t offset = 0;
  size_t bytes = 0;
};

// The element types and reductions of the native collectives qc asks of
// NCCL: float sums (codec none) and the minimum of two words that checks
// every rank is in the same call. (The global codecs' integer sums travel
// packed over point-to-point: algorithms/native.cpp.)
enum class NcclReduction { kSumFloat32, kMinUint64 };

// Bytes of one element of `r`.
inline size_t element_bytes(NcclReduction r) {
  return r == NcclReduction::kSumFloat32 ? 4 : 8;
}

class NcclBackend {
 public:
  virtual ~NcclBackend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts one group: the send ops' bytes are taken from `image` (a host
  // buffer laid out like the device buffer the ops use) before this returns.
  // `image` stays alive and untouched by the caller until poll says done.
  virtual Status start(uint8_t* image, size_t image_bytes, const std::vector<NcclOp>& ops) = 0;
  // Starts one ncclAllReduce, in place, of `count` elements at `data` (host
  // memory, count * element_bytes(reduction) bytes, taken before this
  // returns). `data` stays alive and untouched by the caller until poll says
  // done; the result is then in `data`, the same on every rank.
  virtual Status start_allreduce(void* data, size_t count, NcclReduction reduction) = 0;
  // Enqueues ncclAllReduce of `count` floats from `send` to `recv` (device
  // memory of the communicator's device; the same pointer is in place), a
  // sum or NCCL's average, on the caller's `stream`, and returns without
  // waiting for it.
  virtual Status enqueue_allreduce(const float* send, float* recv, size_t count, bool average,
                                   void* stream) = 0;
  // Enqueues one group of ncclSend/ncclRecv of `ops` (device memory of the
  // communicator's device, ncclUint8 counts) on the caller's `stream`, and
  // returns without waiting for it.
  virtual Status enqueue_group(const DeviceTransfer* ops, size_t count, void* stream) = 0;
  // INVALID_ARGUMENT unless `send` and `recv` are memory that NCCL can use
  // on the communicator's device.
  virtual Status check_device_buffers(const void* send, const void* recv) = 0;
  // An error NCCL found in the background (ncclCommGetAsyncError): a
  // collective enqueued earlier that failed. OK while there is none.
  virtual Status async_error() = 0;
  // *done once every op of the started group or allreduce has finished and
  // its results are back in host memory; an error status when NCCL or CUDA
  // reported one.
  virtual Status poll(bool* done) = 0;
  // ncclCommAbort: unblocks this rank's pending operations. After it, start
  // and poll fail.
  virtual void abort() = 0;
};

class NcclTransport final : public Transport {
 public:
  explicit NcclTransport(std::unique_ptr<NcclBackend> backend);
  ~NcclTransport() override;

  const char* name() const override { return "nccl"; }
  int rank() const override { return backend_->rank(); }
  int size() const override { return backend_->size(); }

  Status post_send(int peer, uint64_t tag, const void* data, size_t bytes, size_t frame,
                   Request* req) override;
  Status post_recv(int peer, uint64_t tag, void* buffer, size_t capacity, Request* req) override;
  Status wait_all(Request* reqs, size_t count, Deadline deadline) override;

  // ncclAllReduce on host data, copied through the device like the frames.
  // The ranks' agreement on the call (agree) comes first, as on MPI: a native
  // collective carries no envelope, and NCCL would hang or mix up data of
  // calls that differ.
  bool has_native_float_allreduce() const override { return true; }
  Status allreduce_float(const float* send, float* recv, size_t count, Deadline deadline) override;
  Status agree(uint64_t value, Deadline deadline) override;
  // ncclAllReduce on the caller's device buffers and stream: no copy, no
  // wait. NCCL keeps the order in which a communicator's operations were
  // enqueued, across streams, so the agreement of the next call waits for
  // this one to run on its stream: that wait counts against its deadline.
  bool has_device_float_allreduce() const override { return true; }
  Status check_device_buffers(const float* send, const float* recv) const override {
    return backend_->check_device_buffers(send, recv);
  }
  Status enqueue_device_allreduce_float(const float* send, float* recv, size_t count,
                                        bool average, void* stream) override;

  // The frames of a compressed allreduce on device buffers
  // (allreduce_enqueued): ncclSend/ncclRecv on the caller's buffers
  // and stream, no copy, no wait.
  bool has_device_groups() const override { return true; }
  Status enqueue_device_group(const DeviceTransfer* ops, size_t count, void* stream) override;

  void abort(const Status& reason) override;
  // Also asks NCCL for an error found since the last call (an enqueued
  // allreduce that failed): such an error breaks the group like any other.
  Status failure() const override;

  // The header in front of every frame: the qc tag, then the payload length
  // (little endian), so a receiver can tell a wrong message from its own.
  static constexpr size_t kFrameHeader = 16;

 private:
  Status check_peer(int peer) const;
  // The failure recorded so far, without asking NCCL: what the transport's
  // own loops check (each call starts with failure(), which asks).
  Status recorded_failure() const;
  Status fail(Request* reqs, size_t count, const Status& status);
  // Polls the started group or allreduce until it is done, the deadline
  // passes (QC_ERROR_TIMEOUT naming `what`, and an abort) or another thread
  // aborts the group.
  Status await(Deadline deadline, const std::function<std::string()>& what);
  // One in-place native allreduce, started and awaited; aborts on failure.
  Status native_allreduce(void* data, size_t count, NcclReduction reduction, Deadline deadline,
                          const char* what);

  std::unique_ptr<NcclBackend> backend_;
  std::vector<uint8_t> image_;  // the wait's frames, host side
  std::vector<NcclOp> ops_;
  mutable std::mutex failure_mutex_;  // qc_comm_get_async_error reads from any thread
  mutable Status failure_;  // failure() records NCCL's asynchronous errors
};

}  // namespace qc
